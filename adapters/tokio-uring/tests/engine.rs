//! Engine behaviour beyond the conformance suite (which also checks that
//! reads complete on their own when the issuing stream is dropped or not
//! polled): a runtime shutting down with reads in flight leaves no frame
//! valid or pinned (also one a program starts itself, inside
//! `release_orphans_after`), and reads started outside a runtime fail
//! cleanly. (The
//! file type is pagestream-uring's; its tests are there.)

mod common;

use common::{engine_or_skip, stamped};
use futures::StreamExt;
use pagestream::testing::stamp;
use pagestream::{source, BufferPool, EngineFile, IoEngine, ReadError, ReadRequest, ReadStream};
use pagestream_tokio_uring::{release_orphans_after, try_start, TokioUringEngine, TokioUringFile};
use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

const BS: usize = 8192;

/// Polls `fut` exactly once.
async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx))).await
}

/// Lets every other task of the runtime run once.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// The runtime shuts down while reads are submitted and not yet reaped:
/// tokio-uring cancels them and waits for the kernel, the requests are
/// dropped, and their frames are empty again (never valid, never pinned).
/// A new runtime then reads every page right through the same pool.
#[test]
fn runtime_shutdown_with_reads_in_flight() {
    let Some(engine) = engine_or_skip("runtime_shutdown_with_reads_in_flight") else {
        return;
    };
    for direct in [false, true] {
        // More blocks than the first poll can have in flight (16 x 32).
        let n = 2048;
        let (file, seed) = stamped(n, BS, direct);
        let id = file.id();
        let pool = BufferPool::new(1024, BS).expect("pool");
        let started = try_start(async {
            let mut a = ReadStream::builder(&pool, engine.clone(), file.clone())
                .max_ios(16)
                .io_combine_limit(32)
                .full(true)
                .build(source::forward(0..n))
                .expect("build");
            assert!(poll_once(&mut a.next()).await.is_pending());
            let reading = pool.stats().reading;
            // The read tasks run once: each submits its SQE and waits.
            YieldNow(false).await;
            drop(a);
            reading
        })
        .expect("runtime");
        assert!(started > 0, "direct={direct}: no reads were started");
        let ps = pool.stats();
        assert_eq!(
            (ps.pinned, ps.reading),
            (0, 0),
            "direct={direct}: after shutdown: {ps}"
        );
        // Whatever was not reaped before the shutdown is not valid now; what
        // is valid must be right, which the full scan below checks.
        let valid_before = (0..n).filter(|&b| pool.contains(id, b)).count();
        assert!(
            valid_before < n as usize,
            "direct={direct}: every block valid although reads were cancelled"
        );
        try_start(async {
            let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
                .build(source::forward(0..n))
                .expect("build");
            let mut i = 0;
            while let Some(page) = s.next().await {
                let page = page.expect("page");
                assert!(stamp::check(seed, i, &page), "block {i} wrong");
                i += 1;
            }
            assert_eq!(i, n);
            let st = s.close().await;
            assert_eq!(st.hits as usize, valid_before, "{st}");
        })
        .expect("runtime");
    }
}

/// A stream polled outside any runtime gets an error naming the problem for
/// its blocks, not a panic, and leaves nothing pinned or being read.
#[test]
fn read_outside_runtime_fails_cleanly() {
    let Some(engine) = engine_or_skip("read_outside_runtime_fails_cleanly") else {
        return;
    };
    let (file, _) = stamped(8, BS, false);
    let pool = BufferPool::new(16, BS).expect("pool");
    let mut s = ReadStream::builder(&pool, engine, file)
        .build(source::forward(0..8))
        .expect("build");
    let first = futures::executor::block_on(s.next()).expect("an item");
    let e = first.expect_err("a read outside a runtime must fail");
    assert!(
        matches!(ReadError::from_io(&e), Some(ReadError::Io { block: 0, .. })),
        "{e}"
    );
    assert!(
        e.to_string().contains("outside a tokio-uring runtime"),
        "{e}"
    );
    drop(s);
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading, ps.valid), (0, 0, 0), "{ps}");
}

/// A stream polled on a plain tokio runtime, not tokio-uring's, gets the
/// same clean error as outside any runtime, on a current-thread runtime (the
/// flavour tokio-uring's is, as under `#[tokio::main(flavor =
/// "current_thread")]`), inside a `LocalSet` on one, and on a multi-thread
/// runtime; no panic, nothing left pinned or being read.
#[test]
fn read_on_a_plain_tokio_runtime_fails_cleanly() {
    let Some(engine) = engine_or_skip("read_on_a_plain_tokio_runtime_fails_cleanly") else {
        return;
    };
    let (file, _) = stamped(8, BS, false);
    for flavor in ["current-thread", "current-thread LocalSet", "multi-thread"] {
        let pool = BufferPool::new(16, BS).expect("pool");
        let rt = if flavor == "multi-thread" {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_time()
                .build()
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
        }
        .expect("tokio runtime");
        let scan = async {
            let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
                .build(source::forward(0..8))
                .expect("build");
            let first = tokio::time::timeout(Duration::from_secs(20), s.next()).await;
            drop(s);
            first
        };
        let run = AssertUnwindSafe(|| {
            if flavor.ends_with("LocalSet") {
                tokio::task::LocalSet::new().block_on(&rt, scan)
            } else {
                rt.block_on(scan)
            }
        });
        let first = std::panic::catch_unwind(run)
            .unwrap_or_else(|_| panic!("{flavor}: polling the stream panicked"))
            .unwrap_or_else(|_| panic!("{flavor}: no item within 20 s"))
            .expect("an item");
        let e = first.expect_err("a read outside tokio-uring must fail");
        assert!(
            matches!(ReadError::from_io(&e), Some(ReadError::Io { block: 0, .. })),
            "{flavor}: {e}"
        );
        assert!(
            e.to_string().contains("outside a tokio-uring runtime"),
            "{flavor}: {e}"
        );
        let ps = pool.stats();
        assert_eq!(
            (ps.pinned, ps.reading, ps.valid),
            (0, 0, 0),
            "{flavor}: {ps}"
        );
    }
}

/// A panic payload whose own drop panics.
struct BadPayload;

impl Drop for BadPayload {
    fn drop(&mut self) {
        panic!("BadPayload: this panic payload's drop panics on purpose");
    }
}

/// Gives every read a finish hook that panics with a [`BadPayload`] once
/// `armed`.
#[derive(Clone)]
struct PanickingHooks {
    inner: TokioUringEngine,
    armed: Arc<AtomicBool>,
}

impl IoEngine for PanickingHooks {
    type File = TokioUringFile;

    fn start_read(&self, file: &TokioUringFile, mut req: ReadRequest) {
        let armed = Arc::clone(&self.armed);
        req.on_finish(move |_| {
            if armed.load(Ordering::SeqCst) {
                std::panic::panic_any(BadPayload);
            }
        });
        self.inner.start_read(file, req);
    }

    fn name(&self) -> &'static str {
        "panicking-hooks"
    }
}

/// A program runs `tokio_uring::start` itself, inside
/// `release_orphans_after`, and its runtime ends with reads in flight:
/// their frames stay "being read" until the runtime is gone (tokio-uring
/// drops their data before the kernel is done), then the reads end as
/// cancelled, leaving nothing pinned or being read. Their hooks (armed as
/// the runtime ends) panic there, outside tokio-uring: the first panic
/// comes out of `release_orphans_after`, the others are dropped although
/// their payloads panic as they are. Some round must have had reads in
/// flight at the end.
#[test]
fn release_orphans_after_ends_the_reads_a_runtime_left_behind() {
    let Some(engine) = engine_or_skip("release_orphans_after_ends_the_reads_a_runtime_left_behind")
    else {
        return;
    };
    let n = 2048;
    let (file, _seed) = stamped(n, BS, true);
    let pool = BufferPool::new(1024, BS).expect("pool");
    let mut kept_seen = 0;
    for round in 0..5 {
        let hooked = PanickingHooks {
            inner: engine.clone(),
            armed: Arc::new(AtomicBool::new(false)),
        };
        let started = Cell::new(0);
        let kept = Cell::new(0);
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            release_orphans_after(|| {
                tokio_uring::start(async {
                    let mut a = ReadStream::builder(&pool, hooked.clone(), file.clone())
                        .max_ios(16)
                        .io_combine_limit(32)
                        .full(true)
                        .build(source::forward(0..n))
                        .expect("build");
                    assert!(poll_once(&mut a.next()).await.is_pending());
                    started.set(pool.stats().reading);
                    YieldNow(false).await;
                    drop(a);
                    hooked.armed.store(true, Ordering::SeqCst);
                });
                kept.set(pool.stats().reading);
            })
        }));
        assert!(started.get() > 0, "round {round}: no reads were started");
        let ps = pool.stats();
        assert_eq!((ps.pinned, ps.reading), (0, 0), "round {round}: {ps}");
        match r {
            Ok(()) => assert_eq!(kept.get(), 0, "round {round}: hooks ran, no panic"),
            Err(p) => {
                let bad = p.is::<BadPayload>();
                // Its drop would panic here; it is a test's payload.
                std::mem::forget(p);
                assert!(bad, "round {round}: another panic than the hooks'");
                assert!(
                    kept.get() > 0,
                    "round {round}: a hook ran inside tokio-uring"
                );
            }
        }
        kept_seen = kept_seen.max(kept.get());
    }
    assert!(kept_seen > 0, "no round had reads in flight at the end");
}
