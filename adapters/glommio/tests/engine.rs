//! Engine behaviour beyond the conformance suite: block sizes are checked
//! against the file's O_DIRECT alignment at open, and the copy is counted.

use futures::StreamExt;
use pagestream::testing::files::temp_path;
use pagestream::testing::{stamp, PanicOnFinish, StampedFile};
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_glommio::{cancel_reads_in_flight, make_executor, GlommioEngine, GlommioFile};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::Poll;

const BS: usize = 8192;

/// A glommio executor, or `None` when glommio cannot start here (io_uring
/// unavailable, `RLIMIT_MEMLOCK` too low): the test is then skipped, or
/// fails under `CI=true` (see [`pagestream::testing::require`]).
fn executor_or_skip() -> Option<glommio::LocalExecutor> {
    pagestream::testing::require("glommio (io_uring, RLIMIT_MEMLOCK)", make_executor())
}

/// Polls `fut` exactly once.
async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx))).await
}

/// Every byte glommio reads is copied once into a frame, and nothing is
/// left pinned or being read. (That an abandoned stream's reads complete on
/// their own is the conformance suite's `abandoned_stream`.)
#[test]
fn every_byte_read_is_copied_once() {
    let Some(ex) = executor_or_skip() else {
        return;
    };
    ex.run(async {
        let n = 256;
        let tmp = StampedFile::new("copied", n, BS);
        let (path, seed) = (tmp.path(), tmp.seed());
        let file = GlommioFile::open(path, BS).await.expect("open");
        tmp.remove();
        let pool = BufferPool::new(512, BS).expect("pool");
        let engine = GlommioEngine::new();
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(8)
            .io_combine_limit(16)
            .build(source::forward(0..n))
            .expect("build");
        let mut i = 0;
        while let Some(page) = s.next().await {
            let page = page.unwrap_or_else(|e| panic!("block {i}: {e}"));
            assert!(stamp::check(seed, i, &page), "block {i} wrong");
            i += 1;
        }
        assert_eq!(i, n);
        s.close().await;
        let ps = pool.stats();
        assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
        let es = engine.stats();
        assert_eq!(es.bytes_copied, n * BS as u64, "{es:?}");
        assert_eq!(es.bytes_read, n * BS as u64, "{es:?}");
        file.close().await.expect("close");
    });
}

/// Block sizes the file cannot be read with are refused at open with
/// InvalidInput naming the block size; a good one is accepted.
#[test]
fn block_size_checked_at_open() {
    let tmp = StampedFile::with_seed("align", 1, 4, 4096);
    let path = tmp.path();
    let Some(ex) = executor_or_skip() else {
        return;
    };
    ex.run(async {
        for bad in [256usize, 1000, 6144] {
            let e = GlommioFile::open(path, bad)
                .await
                .expect_err("bad block size");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().contains(&format!("block size {bad}")), "{e}");
        }
        let f = GlommioFile::open(path, 4096)
            .await
            .expect("4096 works here");
        let align = f.alignment();
        assert!(align >= 512 && 4096 % align == 0, "alignment {align}");
        assert!(!f.kernel_readahead());
        assert_eq!(f.byte_len().expect("len"), 4 * 4096);
        if align > 512 {
            let e = GlommioFile::open(path, 512)
                .await
                .expect_err("below alignment");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("block size 512"), "{e}");
        }
        let e = GlommioFile::open(temp_path("missing"), 4096)
            .await
            .expect_err("missing file");
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        assert!(f.close().await.expect("close"));
    });
    tmp.remove();
}

/// The executor's run ends while reads are in flight. glommio would leak
/// their tasks when the executor is dropped, leaving frames "being read"
/// forever; `cancel_reads_in_flight` drops the requests instead, so the
/// frames are empty again (never pinned, never left reading). A new
/// executor then reads every page right through the same pool.
#[test]
fn executor_shutdown_with_reads_in_flight() {
    if executor_or_skip().is_none() {
        return;
    }
    let n = 2048;
    let tmp = StampedFile::new("shutdown", n, BS);
    let (path, seed) = (tmp.path(), tmp.seed());
    let pool = BufferPool::new(1024, BS).expect("pool");
    let started = {
        let ex = make_executor().expect("executor");
        let reading = ex.run(async {
            let file = GlommioFile::open(path, BS).await.expect("open");
            let mut a = ReadStream::builder(&pool, GlommioEngine::new(), file)
                .max_ios(16)
                .io_combine_limit(32)
                .full(true)
                .build(source::forward(0..n))
                .expect("build");
            assert!(poll_once(&mut a.next()).await.is_pending());
            let reading = pool.stats().reading;
            // Let the read tasks start their reads.
            glommio::yield_if_needed().await;
            futures::future::ready(()).await;
            drop(a);
            reading
        });
        let cancelled = cancel_reads_in_flight();
        eprintln!("cancelled {cancelled} reads still in flight");
        reading
    };
    assert!(started > 0, "no reads were started");
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "after shutdown: {ps}");
    let ex = make_executor().expect("executor");
    ex.run(async {
        let file = GlommioFile::open(path, BS).await.expect("open");
        let mut s = ReadStream::builder(&pool, GlommioEngine::new(), file.clone())
            .build(source::forward(0..n))
            .expect("build");
        let mut i = 0;
        while let Some(page) = s.next().await {
            let page = page.expect("page");
            assert!(stamp::check(seed, i, &page), "block {i} wrong");
            i += 1;
        }
        assert_eq!(i, n);
        s.close().await;
        file.close().await.expect("close");
    });
    tmp.remove();
}

/// Reads are in flight when the executor's run ends, and the first read's
/// finish hook panics when `cancel_reads_in_flight` cancels it: the panic
/// reaches the caller only after every other read is cancelled too, so no
/// frame is left "being read" (a stream waiting for such a block would
/// wait forever), and a new executor reads every page right through the
/// same pool. Several rounds: the registry is walked in no fixed order.
#[test]
fn hook_panic_while_cancelling_strands_no_read() {
    if executor_or_skip().is_none() {
        return;
    }
    let (streams, per) = (16u64, 8u64);
    let n = streams * per;
    let tmp = StampedFile::new("cancel-panic", n, BS);
    let (path, seed) = (tmp.path(), tmp.seed());
    let pool = BufferPool::new(2 * n as usize, BS).expect("pool");
    for round in 0..4 {
        let ex = make_executor().expect("executor");
        let reading = ex.run(async {
            let file = GlommioFile::open(path, BS).await.expect("open");
            let engine = PanicOnFinish::new(GlommioEngine::new(), 0);
            for i in 0..streams {
                let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
                    .max_ios(0)
                    .io_combine_limit(per as usize)
                    .full(true)
                    .build(source::forward(i * per..(i + 1) * per))
                    .expect("build");
                assert!(poll_once(&mut s.next()).await.is_pending());
                drop(s); // its read stays in flight
            }
            pool.stats().reading
        });
        assert_eq!(reading, n as usize, "round {round}: not every read started");
        let r = std::panic::catch_unwind(cancel_reads_in_flight);
        assert!(
            r.is_err(),
            "round {round}: the hook's panic did not reach the caller"
        );
        drop(ex);
        let ps = pool.stats();
        assert_eq!((ps.pinned, ps.reading), (0, 0), "round {round}: {ps}");
        let ex = make_executor().expect("executor");
        ex.run(async {
            let file = GlommioFile::open(path, BS).await.expect("open");
            let mut s = ReadStream::builder(&pool, GlommioEngine::new(), file.clone())
                .build(source::forward(0..n))
                .expect("build");
            let mut i = 0;
            while let Some(page) = s.next().await {
                let page = page.expect("page");
                assert!(
                    stamp::check(seed, i, &page),
                    "round {round}: block {i} wrong"
                );
                i += 1;
            }
            assert_eq!(i, n, "round {round}");
            s.close().await;
            // The next round's reads must not be served from the pool.
            pool.invalidate(file.id());
            file.close().await.expect("close");
        });
    }
    tmp.remove();
}

fn mkfifo(p: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("no NUL in path");
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A directory, a FIFO, a socket and a character device are refused at
/// open with an error naming them, never opened to yield no pages; a
/// FIFO's open does not block.
#[test]
fn only_regular_files_and_block_devices_open() {
    if executor_or_skip().is_none() {
        return;
    }
    let things = pagestream::testing::NotRegularFiles::new("glommio-kinds", mkfifo);
    things.assert_refused(|p| {
        let ex = make_executor()?;
        let p = p.to_path_buf();
        ex.run(async move {
            let f = GlommioFile::open(&p, 4096).await?;
            f.close().await.map(drop)
        })
    });
}

/// An open polled many times before it completes (the task it runs in is
/// woken by other work, as a task that scans many files in one `join` is)
/// completes: glommio 0.9 keeps a clone of the caller's waker for every poll
/// of a pending I/O, and the task's waker count, 16 bits, would overflow
/// (a panic inside glommio) after 32,767 of them.
#[test]
fn an_open_polled_many_times_while_pending_completes() {
    let Some(ex) = executor_or_skip() else { return };
    let tmp = StampedFile::new("many-polls", 4, BS);
    let path = tmp.path().to_path_buf();
    ex.run(async move {
        let mut open = Box::pin(GlommioFile::open(&path, BS));
        let mut polls = 0u64;
        let start = std::time::Instant::now();
        let file = std::future::poll_fn(|cx| {
            polls += 1;
            match open.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(r),
                Poll::Pending if start.elapsed().as_secs() < 30 => {
                    // Woken by something else: polled again at once.
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                Poll::Pending => panic!("the open was still pending after {polls} polls"),
            }
        })
        .await
        .expect("open");
        assert_eq!(file.byte_len().unwrap(), 4 * BS as u64);
    });
}
