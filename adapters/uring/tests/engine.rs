//! The driver beyond the conformance suite (which also checks that an
//! abandoned stream's reads complete on their own): `block_on` returns only
//! once its reads are over,
//! a runtime dropped with reads in flight leaves no frame valid or pinned,
//! reads started outside `block_on` fail cleanly, wake-ups from other
//! threads end a wait, two runtimes share a pool, a SQPOLL thread asleep
//! is woken when the submission queue is full (while reading and in the
//! drop), a read into more scattered frames than one `READV` takes is
//! done in parts, and bad settings are refused with errors naming them.

mod common;

use common::{runtime_or_skip, runtime_or_skip_with, stamped};
use futures::StreamExt;
use pagestream::testing::{stamp, PanicOnFinish};
use pagestream::{source, BufferPool, EngineFile, ReadError, ReadStream};
use pagestream_uring::{UringFile, UringRuntime};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::Poll;

const BS: usize = 8192;

/// Polls `fut` exactly once.
async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx))).await
}

/// Scans blocks `0..n` of `file` through `pool` on `rt`, checking every
/// page's stamp; returns the scan's hits (blocks found in the pool).
fn scan_verifies(
    rt: &UringRuntime,
    pool: &BufferPool,
    file: &UringFile,
    seed: u64,
    n: u64,
    what: &str,
) -> u64 {
    rt.block_on(async {
        let mut s = ReadStream::builder(pool, rt.engine(), file.clone())
            .build(source::forward(0..n))
            .expect("build");
        let mut i = 0;
        while let Some(page) = s.next().await {
            let page = page.unwrap_or_else(|e| panic!("{what}: block {i}: {e}"));
            assert!(stamp::check(seed, i, &page), "{what}: block {i} wrong");
            i += 1;
        }
        assert_eq!(i, n, "{what}: scan ended early");
        s.close().await.hits
    })
}

/// A future that returns while its stream's reads are in flight: `block_on`
/// waits for them before it returns, so their blocks are valid afterwards
/// and nothing is left being read.
#[test]
fn block_on_returns_after_its_reads() {
    let Some(rt) = runtime_or_skip("block_on_returns_after_its_reads") else {
        return;
    };
    let n = 512;
    let (file, seed) = stamped(n, BS, true);
    let id = file.id();
    let pool = BufferPool::new(1024, BS).expect("pool");
    let started = rt.block_on(async {
        let mut s = ReadStream::builder(&pool, rt.engine(), file.clone())
            .max_ios(16)
            .io_combine_limit(4)
            .full(true)
            .build(source::forward(0..n))
            .expect("build");
        assert!(poll_once(&mut s.next()).await.is_pending());
        pool.stats().reading
    });
    assert!(started > 0, "no reads were started");
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
    let valid = (0..n).filter(|&b| pool.contains(id, b)).count();
    assert_eq!(valid, started, "every block read was published: {ps}");
    // And they are right: a second scan hits them.
    let hits = scan_verifies(&rt, &pool, &file, seed, n, "second scan");
    assert_eq!(hits as usize, valid);
}

/// The future panics with reads in flight; the runtime is dropped: the
/// driver cancels the reads and waits for the kernel before their frames
/// go back to empty (never valid, never pinned, never "being read"). A new
/// runtime then reads every page right through the same pool.
#[test]
fn runtime_dropped_with_reads_in_flight() {
    if runtime_or_skip("runtime_dropped_with_reads_in_flight").is_none() {
        return;
    }
    for direct in [false, true] {
        let n = 2048;
        let (file, seed) = stamped(n, BS, direct);
        let id = file.id();
        let pool = BufferPool::new(1024, BS).expect("pool");
        // Buffered reads of the cached file through the ring, so that they
        // are in flight when the future panics.
        let rt = UringRuntime::builder()
            .nowait(false)
            .build()
            .expect("runtime");
        let reading = std::cell::Cell::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async {
                let mut a = ReadStream::builder(&pool, rt.engine(), file.clone())
                    .max_ios(16)
                    .io_combine_limit(32)
                    .full(true)
                    .build(source::forward(0..n))
                    .expect("build");
                assert!(poll_once(&mut a.next()).await.is_pending());
                reading.set(pool.stats().reading);
                drop(a); // its reads stay in flight
                panic!("the workload fails with reads in flight");
            })
        }));
        assert!(r.is_err());
        assert!(reading.get() > 0, "direct={direct}: no reads were started");
        assert!(
            pool.stats().reading > 0,
            "direct={direct}: the reads were reaped although no one waited"
        );
        drop(rt);
        let ps = pool.stats();
        assert_eq!(
            ps.reading, 0,
            "direct={direct}: after the runtime was dropped: {ps}"
        );
        let valid_before = (0..n).filter(|&b| pool.contains(id, b)).count();
        assert!(valid_before < n as usize, "direct={direct}");
        let rt = UringRuntime::new().expect("runtime");
        scan_verifies(&rt, &pool, &file, seed, n, &format!("direct={direct}"));
    }
}

/// A stream polled outside the runtime's `block_on` gets an error naming
/// the problem for its blocks, not a panic or a hang, and leaves nothing
/// pinned or being read.
#[test]
fn read_outside_block_on_fails_cleanly() {
    let Some(rt) = runtime_or_skip("read_outside_block_on_fails_cleanly") else {
        return;
    };
    let (file, _) = stamped(8, BS, false);
    let pool = BufferPool::new(16, BS).expect("pool");
    let mut s = ReadStream::builder(&pool, rt.engine(), file)
        .build(source::forward(0..8))
        .expect("build");
    let first = futures::executor::block_on(s.next()).expect("an item");
    let e = first.expect_err("a read outside block_on must fail");
    assert!(
        matches!(ReadError::from_io(&e), Some(ReadError::Io { block: 0, .. })),
        "{e}"
    );
    assert!(
        e.to_string().contains("outside UringRuntime::block_on"),
        "{e}"
    );
    drop(s);
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading, ps.valid), (0, 0, 0), "{ps}");
    assert_eq!(rt.stats().reads, 0);
}

/// A future woken only from another thread, while the runtime waits in the
/// kernel with nothing in flight, finishes: the wake-up reaches the ring.
#[test]
fn wake_from_another_thread_ends_the_wait() {
    let Some(rt) = runtime_or_skip("wake_from_another_thread_ends_the_wait") else {
        return;
    };
    for round in 0..20u32 {
        let (tx, rx) = futures::channel::oneshot::channel();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(u64::from(round % 4)));
            tx.send(round).expect("send");
        });
        assert_eq!(rt.block_on(rx).expect("value"), round);
        t.join().expect("sender");
    }
}

/// Two runtimes on two threads scan the same file through one pool, each
/// its own half first and then the other's, so each waits for blocks the
/// other is reading: every page is right and nothing is left pinned.
#[test]
fn two_runtimes_share_a_pool() {
    if runtime_or_skip("two_runtimes_share_a_pool").is_none() {
        return;
    }
    let n = 1024u64;
    let (file, seed) = stamped(n, BS, true);
    let pool = BufferPool::new(2048, BS).expect("pool");
    std::thread::scope(|s| {
        for half in 0..2u64 {
            let (pool, file) = (&pool, file.clone());
            s.spawn(move || {
                let rt = UringRuntime::new().expect("runtime");
                let order: Vec<u64> = (0..n).map(|i| (i + half * n / 2) % n).collect();
                rt.block_on(async {
                    let mut st = ReadStream::builder(pool, rt.engine(), file)
                        .max_ios(8)
                        .io_combine_limit(4)
                        .build(source::iter(order.clone()))
                        .expect("build");
                    let mut i = 0;
                    while let Some(page) = st.next().await {
                        let page = page.expect("page");
                        assert_eq!(page.block(), order[i]);
                        assert!(stamp::check(seed, page.block(), &page));
                        i += 1;
                    }
                    assert_eq!(i as u64, n);
                });
            });
        }
    });
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
    assert_eq!(ps.valid, n as usize, "{ps}");
}

/// Many more reads in flight than the submission queue has entries, each
/// submitted on its own or in batches, and with deferred task running:
/// every block arrives, right and in order, each read once.
#[test]
fn more_reads_than_submission_entries() {
    for (batch, defer) in [(1, false), (3, false), (1, true), (8, true)] {
        let b = UringRuntime::builder()
            .entries(4)
            .submit_batch(batch)
            .defer_taskrun(defer);
        let Some(rt) = runtime_or_skip_with("more_reads_than_submission_entries", b) else {
            return;
        };
        let n = 512u64;
        let (file, seed) = stamped(n, BS, true);
        let pool = BufferPool::new(1024, BS).expect("pool");
        // A scattered order, so no two blocks combine: one read per block.
        let order: Vec<u64> = (0..n).map(|i| (i * 197) % n).collect();
        let what = format!("batch {batch} defer {defer}");
        let got = rt.block_on(async {
            let mut s = ReadStream::builder(&pool, rt.engine(), file.clone())
                .max_ios(64)
                .io_combine_limit(1)
                .full(true)
                .build(source::iter(order.clone()))
                .expect("build");
            let mut got = Vec::new();
            while let Some(page) = s.next().await {
                let page = page.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(stamp::check(seed, page.block(), &page), "{what}");
                got.push(page.block());
            }
            let st = s.close().await;
            assert!(st.max_in_flight > 4, "{what}: {st}");
            got
        });
        assert_eq!(got, order, "{what}");
        let st = rt.stats();
        assert_eq!(st.reads, n, "{what}: {st:?}");
        if batch > 1 {
            assert!(st.submit_calls < n, "{what}: {st:?}");
        }
    }
}

/// A future that wakes itself on every poll (a busy yield) while it waits
/// for reads still gets them: the runtime submits queued reads and takes
/// completions after every poll, and with deferred task running asks the
/// kernel to post them.
#[test]
fn self_waking_future_does_not_starve_its_reads() {
    for (defer, batch) in [(false, 1), (true, 1), (false, 8), (true, 8)] {
        let b = UringRuntime::builder()
            .defer_taskrun(defer)
            .submit_batch(batch);
        let Some(rt) = runtime_or_skip_with("self_waking_future_does_not_starve_its_reads", b)
        else {
            return;
        };
        let n = 64u64;
        let (file, seed) = stamped(n, BS, true);
        let pool = BufferPool::new(128, BS).expect("pool");
        let got = rt.block_on(async {
            let mut s = ReadStream::builder(&pool, rt.engine(), file)
                .max_ios(4)
                .io_combine_limit(2)
                .build(source::forward(0..n))
                .expect("build");
            let mut got = 0;
            loop {
                let next = std::future::poll_fn(|cx| {
                    cx.waker().wake_by_ref();
                    s.poll_next_unpin(cx)
                })
                .await;
                let Some(page) = next else { break };
                let page = page.expect("page");
                assert!(
                    stamp::check(seed, got, &page),
                    "defer {defer} batch {batch}: block {got}"
                );
                got += 1;
            }
            got
        });
        assert_eq!(got, n, "defer {defer} batch {batch}");
    }
}

/// A hook that panics while the runtime completes a batch of reads: the
/// panic reaches the caller of `block_on`, and the reads reaped with it are
/// not lost — dropping the runtime finishes (no hang), nothing is left
/// pinned or being read, and a new runtime reads every page right.
#[test]
fn panic_while_completing_loses_no_read() {
    if runtime_or_skip("panic_while_completing_loses_no_read").is_none() {
        return;
    }
    for k in [0, 3, 8] {
        let n = 512;
        let (file, seed) = stamped(n, BS, true);
        let pool = BufferPool::new(1024, BS).expect("pool");
        let rt = UringRuntime::new().expect("runtime");
        let engine = PanicOnFinish::new(rt.engine(), k);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async {
                let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
                    .max_ios(16)
                    .io_combine_limit(1)
                    .full(true)
                    .build(source::forward(0..n))
                    .expect("build");
                while let Some(page) = s.next().await {
                    drop(page);
                }
            })
        }));
        assert!(r.is_err(), "k {k}: the hook's panic did not reach block_on");
        drop(engine);
        drop(rt); // must not hang
        let ps = pool.stats();
        assert_eq!((ps.pinned, ps.reading), (0, 0), "k {k}: {ps}");
        let rt = UringRuntime::new().expect("runtime");
        scan_verifies(&rt, &pool, &file, seed, n, &format!("k {k}"));
    }
}

/// With a kernel thread polling a two-entry submission queue, many more
/// reads than it holds are pushed at once: the driver waits for room
/// instead of failing reads with "submission queue stays full".
#[test]
fn sqpoll_small_queue_fails_no_read() {
    let b = UringRuntime::builder().sqpoll(50).entries(2);
    let Some(rt) = runtime_or_skip_with("sqpoll_small_queue_fails_no_read", b) else {
        return;
    };
    let n = 2048u64;
    let (file, seed) = stamped(n, BS, true);
    let pool = BufferPool::new(4096, BS).expect("pool");
    let order: Vec<u64> = (0..n).map(|i| (i * 389) % n).collect();
    rt.block_on(async {
        let mut s = ReadStream::builder(&pool, rt.engine(), file)
            .max_ios(32)
            .io_combine_limit(1)
            .full(true)
            .build(source::iter(order.clone()))
            .expect("build");
        let mut i = 0;
        while let Some(page) = s.next().await {
            let page = page.unwrap_or_else(|e| panic!("item {i}: {e}"));
            assert!(stamp::check(seed, order[i], &page));
            i += 1;
        }
        assert_eq!(i, order.len());
    });
}

/// Runs `f` on a thread of its own and waits at most 30 s for it: a hang
/// becomes a failure naming `what` (the stuck thread is left behind; it
/// cannot be stopped).
fn within_30s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(Ok(out)) => out,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(e) => panic!("{what} did not finish within 30 s ({e})"),
    }
}

/// With a kernel thread polling the submission queue and a submission
/// batch larger than the queue, reads are pushed after the thread has gone
/// to sleep (its idle time long past): the queue fills, and the driver must
/// wake the thread to make room instead of waiting for room that never
/// comes.
#[test]
fn sqpoll_full_queue_wakes_the_sleeping_thread() {
    let name = "sqpoll_full_queue_wakes_the_sleeping_thread";
    let got = within_30s(
        "a runtime starting 8 reads on a 4-entry SQPOLL queue",
        move || {
            let b = UringRuntime::builder()
                .entries(4)
                .submit_batch(64)
                .sqpoll(1);
            let rt = runtime_or_skip_with(name, b)?;
            let streams = 8u64;
            let (file, seed) = stamped(8 * streams, BS, true);
            let pool = BufferPool::new(64, BS).expect("pool");
            // Long past the SQ thread's idle time: it sleeps until woken.
            std::thread::sleep(std::time::Duration::from_millis(200));
            Some(rt.block_on(async {
                let mut ss: Vec<_> = (0..streams)
                    .map(|i| {
                        ReadStream::builder(&pool, rt.engine(), file.clone())
                            .max_ios(1)
                            .io_combine_limit(1)
                            .build(source::forward(8 * i..8 * i + 1))
                            .expect("build")
                    })
                    .collect();
                // Each stream starts its one read: 8 SQEs for a 4-entry
                // queue, none of them submitted by the batch.
                for s in &mut ss {
                    assert!(poll_once(&mut s.next()).await.is_pending());
                }
                let mut got = 0;
                for (i, s) in ss.iter_mut().enumerate() {
                    let page = s.next().await.expect("a page").expect("read");
                    assert!(stamp::check(seed, 8 * i as u64, &page), "stream {i}");
                    got += 1;
                }
                got
            }))
        },
    );
    if let Some(got) = got {
        assert_eq!(got, 8);
    }
}

/// The same exposure in the runtime's drop: with more reads in flight than
/// the SQPOLL queue holds and the SQ thread asleep, the drop's cancellations
/// fill the queue; the drop must wake the thread, not wait forever. The
/// reads' frames are then empty again, none pinned or being read.
#[test]
fn sqpoll_drop_wakes_the_sleeping_thread() {
    let name = "sqpoll_drop_wakes_the_sleeping_thread";
    let ps = within_30s(
        "dropping a SQPOLL runtime with 16 reads in flight",
        move || {
            let b = UringRuntime::builder().entries(4).sqpoll(1);
            let rt = runtime_or_skip_with(name, b)?;
            let streams = 16u64;
            let (file, _) = stamped(8 * streams, BS, true);
            let pool = BufferPool::new(64, BS).expect("pool");
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rt.block_on(async {
                    for i in 0..streams {
                        let mut s = ReadStream::builder(&pool, rt.engine(), file.clone())
                            .max_ios(1)
                            .io_combine_limit(1)
                            .build(source::forward(8 * i..8 * i + 1))
                            .expect("build");
                        assert!(poll_once(&mut s.next()).await.is_pending());
                        drop(s); // its read stays in flight
                    }
                    panic!("the workload fails with reads in flight");
                })
            }));
            assert!(r.is_err());
            assert!(pool.stats().reading > 4, "{}", pool.stats());
            // Long past the SQ thread's idle time: it sleeps until woken.
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(rt);
            Some(pool.stats())
        },
    );
    if let Some(ps) = ps {
        assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
    }
}

/// A read into more scattered frames than one `READV` takes (its request
/// gives at most `MAX_BUFFERS` runs): a short read of those runs, then the
/// remainder, every page right; both through the ring, and with the first
/// runs copied by the inline `RWF_NOWAIT` attempt (the file is cached).
#[test]
fn read_into_more_than_max_buffers_scattered_frames() {
    scattered_frames("read_into_more_than_max_buffers_scattered_frames", false);
}

#[test]
fn read_into_more_than_max_buffers_scattered_frames_nowait() {
    scattered_frames(
        "read_into_more_than_max_buffers_scattered_frames_nowait",
        true,
    );
}

fn scattered_frames(test: &str, nowait: bool) {
    let Some(rt) = runtime_or_skip_with(test, UringRuntime::builder().nowait(nowait)) else {
        return;
    };
    let huge = pagestream::MAX_BUFFERS + 100;
    let pool = BufferPool::new(2 * huge, 512).expect("pool");
    // Guards on every other frame (the even blocks of a file read into the
    // fresh pool, one block to a frame): the frames left are scattered.
    let mem = pagestream::testing::MemEngine::new();
    let pins: Vec<_> = futures::executor::block_on(async {
        let n = 2 * huge as u64;
        let mut s = ReadStream::builder(&pool, mem.clone(), mem.create_stamped(n, 512))
            .build(source::forward(0..n))
            .expect("build");
        let mut kept = Vec::new();
        while let Some(p) = s.next().await {
            let p = p.expect("page");
            if p.frame() % 2 == 0 {
                kept.push(p);
            }
        }
        kept
    });
    assert_eq!(pins.len(), huge, "the blocks did not go one to a frame");
    let (file, seed) = stamped(huge as u64, 512, false);
    let st = rt.block_on(async {
        let mut s = ReadStream::builder(&pool, rt.engine(), file)
            .max_ios(1)
            .io_combine_limit(huge)
            .full(true)
            .build(source::forward(0..huge as u64))
            .expect("build");
        let mut i = 0;
        while let Some(page) = s.next().await {
            let page = page.unwrap_or_else(|e| panic!("block {i}: {e}"));
            assert!(stamp::check(seed, i, &page), "block {i} wrong");
            i += 1;
        }
        assert_eq!(i, huge as u64);
        s.close().await
    });
    assert_eq!((st.reads, st.blocks_read), (1, huge as u64), "{st}");
    let es = rt.stats();
    if nowait {
        // The first `MAX_BUFFERS` runs copied inline, the rest one `READV`.
        assert_eq!(
            (es.nowait_partial, es.reads, es.vectored),
            (1, 1, 1),
            "{es:?}"
        );
    } else {
        assert_eq!((es.reads, es.vectored), (2, 2), "{es:?}");
    }
    drop(pins);
}

/// Zero-sized settings are refused with an error naming the setting.
#[test]
fn zero_settings_are_refused() {
    for (b, name) in [
        (UringRuntime::builder().entries(0), "entries"),
        (UringRuntime::builder().submit_batch(0), "submit_batch"),
    ] {
        let e = b.build().expect_err("zero must be refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains(name), "{e}");
    }
}

/// `block_on` inside the same runtime's `block_on` is a programming error
/// the runtime names (a panic) instead of hanging; the runtime still works
/// afterwards.
#[test]
fn nested_block_on_panics_and_the_runtime_survives() {
    let Some(rt) = runtime_or_skip("nested_block_on_panics_and_the_runtime_survives") else {
        return;
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async { rt.block_on(async {}) })
    }));
    let panic = r.expect_err("nested block_on must panic");
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(
        msg.contains("block_on called inside the same runtime's block_on"),
        "{msg}"
    );
    assert_eq!(rt.block_on(async { 5 }), 5);
}
