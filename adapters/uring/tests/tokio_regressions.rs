//! Defects a review found in `UringTokioEngine`, each a scenario that hung,
//! aborted or panicked before its fix: a read deferred by another file's
//! help that only the reaper would complete, completions stuck on the
//! kernel's overflow list, the reaper's shutdown wait racing with a
//! stream's help, two panicking hooks of deferred reads in the driver's
//! drop, and a runtime without I/O.

#![cfg(feature = "tokio")]

mod common;

use common::stamped;
use futures::{FutureExt, StreamExt};
use pagestream::testing::{require_named, stamp};
use pagestream::{source, BufferPool, EngineHints, IoEngine, ReadRequest, ReadStream};
use pagestream_uring::{UringFile, UringTokioEngine};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const BS: usize = 8192;

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn engine_on(test: &str, rt: &tokio::runtime::Runtime) -> Option<UringTokioEngine> {
    require_named(
        test,
        "io_uring",
        rt.block_on(async { UringTokioEngine::new() }),
    )
}

/// A read of file G whose completion a stream of file F's help took (and
/// deferred) is completed by G's own stream's help, with the reaper's
/// current-thread runtime never driven: it used to wait for the reaper.
#[test]
fn a_deferred_read_is_completed_by_its_own_streams_help() {
    let rt = current_thread();
    let Some(engine) = engine_on("a_deferred_read_is_completed_by_its_own_streams_help", &rt)
    else {
        return;
    };
    let (g, seed) = stamped(64, BS, true);
    let (f, _) = stamped(64, BS, true);
    let pool = BufferPool::new(64, BS).expect("pool");
    // A virtual disk may finish a read inside the system call that submits
    // it, and the stream's first poll then finds it done: try other blocks
    // until a read is still in flight after the poll that started it.
    let mut block = 5;
    let mut s = loop {
        let mut s = ReadStream::builder(&pool, engine.clone(), g.clone())
            .max_ios(1)
            .build(source::forward(block..block + 1))
            .expect("build");
        if s.next().now_or_never().is_none() {
            break s;
        }
        block += 1;
        assert!(
            block < 37,
            "32 reads in a row finished in the poll that started them"
        );
    };
    // Until F's help has taken G's completion (and deferred it).
    let t = Instant::now();
    while engine.in_flight() > 0 {
        engine.help(&f);
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the read never completed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    let page = loop {
        if let Some(p) = s.next().now_or_never() {
            break p;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "G's stream never completed its read deferred by F's help"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let page = page.expect("a page").expect("read");
    assert_eq!(page.block(), block);
    assert!(
        stamp::check(seed, block, &page),
        "block {block} has the wrong bytes"
    );
    drop(rt);
}

/// A completion queue of 2 entries and 32 reads in flight: completions
/// overflow into the kernel's list, which only an `io_uring_enter` asking
/// for events flushes. The scan used to hang with reads in flight.
#[test]
fn completions_that_overflow_the_queue_are_flushed() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let built = rt.block_on(async { UringTokioEngine::builder().entries(2).cq_entries(2).build() });
    let Some(engine) = require_named(
        "completions_that_overflow_the_queue_are_flushed",
        "io_uring",
        built,
    ) else {
        return;
    };
    let (g, seed) = stamped(256, BS, true);
    let pool = BufferPool::new(256, BS).expect("pool");
    let e = engine.clone();
    let scanned = rt.block_on(async move {
        tokio::time::timeout(Duration::from_secs(20), async move {
            let mut s = ReadStream::builder(&pool, e, g)
                .max_ios(32)
                .io_combine_limit(1)
                .full(true)
                .build(source::iter((0..32u64).map(|i| i * 3)))
                .expect("build");
            let mut n = 0;
            while let Some(p) = s.next().await {
                let p = p.expect("read");
                assert!(
                    stamp::check(seed, p.block(), &p),
                    "block {} wrong",
                    p.block()
                );
                n += 1;
            }
            n
        })
        .await
    });
    assert_eq!(
        scanned.ok(),
        Some(32),
        "the scan hung with {} reads in flight",
        engine.in_flight()
    );
}

/// The reaper's drop (runtime shut down) waits for the reads in flight
/// while another thread's help takes completions: the shutdown always
/// ends. (Its wait used to be untimed, and could wait for a completion
/// the help had already taken.)
#[test]
fn shutdown_ends_while_another_thread_helps() {
    let (g, _) = stamped(4096, BS, true);
    for iter in 0..50u64 {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let Some(engine) = engine_on("shutdown_ends_while_another_thread_helps", &rt) else {
            return;
        };
        let pool = BufferPool::new(1024, BS).expect("pool");
        let mut streams: Vec<_> = (0..32u64)
            .map(|k| {
                let b = (k * 509 + iter * 8) % 4000;
                ReadStream::builder(&pool, engine.clone(), g.clone())
                    .full(true)
                    .build(source::forward(b..b + 16))
                    .expect("build")
            })
            .collect();
        for s in &mut streams {
            let _ = s.next().now_or_never();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let helper = {
            let (engine, g, stop) = (engine.clone(), g.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    engine.help(&g);
                }
            })
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            drop(rt);
            let _ = tx.send(());
        });
        let ended = rx.recv_timeout(Duration::from_secs(20)).is_ok();
        stop.store(true, Ordering::Relaxed);
        helper.join().expect("helper thread");
        assert!(
            ended,
            "iteration {iter}: the runtime's shutdown hung with {} reads in flight",
            engine.in_flight()
        );
        assert_eq!(
            engine.in_flight(),
            0,
            "iteration {iter}: reads left after shutdown"
        );
        drop(streams);
    }
}

/// A panic payload whose own drop panics.
struct BadPayload;

impl Drop for BadPayload {
    fn drop(&mut self) {
        panic!("BadPayload: this panic payload's drop panics on purpose");
    }
}

/// Every read gets a finish hook that, once `armed`, panics with a
/// [`BadPayload`]. Its streams do not help: a read completes only when the
/// test asks the engine to help (or the reaper runs), never in the poll
/// that starts it, however fast the device.
#[derive(Clone)]
struct Hooked {
    inner: UringTokioEngine,
    armed: Arc<AtomicBool>,
}

impl IoEngine for Hooked {
    type File = UringFile;

    fn start_read(&self, file: &UringFile, mut req: ReadRequest) {
        let armed = Arc::clone(&self.armed);
        req.on_finish(move |_| {
            if armed.load(Ordering::SeqCst) {
                std::panic::panic_any(BadPayload);
            }
        });
        self.inner.start_read(file, req);
    }

    fn hints(&self, f: &UringFile) -> EngineHints {
        self.inner.hints(f).with_help(false)
    }

    fn help(&self, f: &UringFile) -> bool {
        self.inner.help(f)
    }

    fn name(&self) -> &'static str {
        "hooked"
    }
}

/// Two reads deferred by another file's help, whose hooks panic when the
/// engine is dropped: the drop resumes one panic and the process goes on
/// (the second hook's panic, during the first one's unwind, used to abort
/// it).
#[test]
fn two_panicking_hooks_of_deferred_reads_do_not_abort_the_drop() {
    let rt = current_thread();
    let Some(engine) = engine_on(
        "two_panicking_hooks_of_deferred_reads_do_not_abort_the_drop",
        &rt,
    ) else {
        return;
    };
    let armed = Arc::new(AtomicBool::new(false));
    let hooked = Hooked {
        inner: engine.clone(),
        armed: Arc::clone(&armed),
    };
    let (g, _) = stamped(64, BS, true);
    let (f, _) = stamped(64, BS, true);
    let pool = BufferPool::new(64, BS).expect("pool");
    let mut streams: Vec<_> = [3u64, 40]
        .iter()
        .map(|&b| {
            ReadStream::builder(&pool, hooked.clone(), g.clone())
                .max_ios(1)
                .build(source::forward(b..b + 1))
                .expect("build")
        })
        .collect();
    for s in &mut streams {
        assert!(
            s.next().now_or_never().is_none(),
            "a read finished in its first poll"
        );
    }
    let t = Instant::now();
    while engine.in_flight() > 0 {
        engine.help(&f);
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the reads never completed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(streams);
    armed.store(true, Ordering::SeqCst);
    drop(hooked);
    // The reaper (never run) holds only a weak handle: this is the last one.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(engine)));
    let payload = r.expect_err("a hook's panic reaches the engine's last owner");
    assert!(payload.is::<BadPayload>(), "the panic is a hook's");
    // Its drop panics too: do not run it.
    std::mem::forget(payload);
    drop(rt);
}

/// Building on a runtime without I/O is an error naming the fix, not a
/// panic inside tokio.
#[test]
fn a_runtime_without_io_is_an_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let r = std::panic::catch_unwind(|| rt.block_on(async { UringTokioEngine::new().map(|_| ()) }));
    let r = r.unwrap_or_else(|_| panic!("UringTokioEngine::new panicked on a runtime without I/O"));
    if let Err(e) = &r {
        if e.to_string().contains("io_uring is unavailable")
            || e.to_string().contains("io_uring_setup")
        {
            return; // no io_uring here: the reactor was never asked
        }
    }
    let e = r.expect_err("a runtime without I/O cannot reap the ring");
    assert!(e.to_string().contains("enable_io"), "{e}");
}

/// Threads start reads and ask for help on one engine at the same time,
/// on cached pages (reads complete as they are submitted, so pushes and
/// the submission queue checks of help interleave as tightly as they can):
/// every read reaches the kernel and every scan ends. (A check of the
/// queue used to store its stale copy of the queue's tail after its lock
/// was released, over another thread's push: that read never reached the
/// kernel, and its scan waited forever.)
#[test]
fn concurrent_pushes_and_helps_lose_no_read() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let Some(engine) = engine_on("concurrent_pushes_and_helps_lose_no_read", &rt) else {
        return;
    };
    const N: u64 = 4096;
    let (file, seed) = stamped(N, BS, false);
    let (tx, rx) = mpsc::channel();
    for t in 0..4 {
        let (engine, file, tx) = (engine.clone(), file.clone(), tx.clone());
        std::thread::spawn(move || {
            let pool = BufferPool::new(256, BS).expect("pool");
            for round in 0..16 {
                let n = futures::executor::block_on(async {
                    let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
                        .max_ios(16)
                        .io_combine_limit(1)
                        .build(source::forward(0..N))
                        .expect("build");
                    let mut n = 0;
                    while let Some(p) = s.next().await {
                        let p = p.expect("read");
                        assert!(stamp::check(seed, p.block(), &p), "block {}", p.block());
                        n += 1;
                    }
                    n
                });
                let _ = tx.send((t, round, n));
            }
        });
    }
    drop(tx);
    for _ in 0..64 {
        let (t, round, n) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "a scan never ended: {} reads in flight, {:?}",
                    engine.in_flight(),
                    engine.stats()
                )
            });
        assert_eq!(n, N, "thread {t}, round {round}: the scan ended early");
    }
    assert_eq!(engine.in_flight(), 0);
}
