//! User code that panics (a read's finish hook) while tokio-uring shuts
//! down with reads in flight must neither abort the process nor free memory
//! the kernel may still write: the frames of a read whose completion has
//! not come stay out of use, whatever panics, and also while the runtime is
//! still shutting down, to a stream on another thread.

mod common;

use common::engine_or_skip;
use futures::StreamExt;
use pagestream::testing::{stamp, PanicOnFinish, StampedFile};
use pagestream::{source, BufferPool, PageGuard, ReadStream};
use pagestream_tokio_uring::{try_start, TokioUringEngine, TokioUringFile};
use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// 16 KiB blocks, 128 to a read: 2 MiB reads.
const BS: usize = 16 << 10;
const COMBINE: usize = 128;
/// Reads in flight when the runtime shuts down.
const READS: usize = 64;
/// Blocks those reads cover (128 MiB), and the pool's frames.
const N: u64 = (READS * COMBINE) as u64;

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

/// Drops the first `len` bytes of `path` from the page cache, so buffered
/// reads of them wait for the device.
fn evict(path: &std::path::Path, len: u64) {
    let f = std::fs::File::open(path).expect("open for fadvise");
    pagestream::os::fadvise(f.as_raw_fd(), 0, len, libc::POSIX_FADV_DONTNEED)
        .expect("posix_fadvise(DONTNEED)");
}

/// Starts `READS` reads of `COMBINE` blocks (blocks `0..N`, one stream
/// each) whose first read's hook panics, and ends the runtime with them in
/// flight: tokio-uring cancels them and waits for their CQEs, then
/// `try_start` ends each as cancelled, which runs the hooks. Returns the
/// frames that were being read, and whether the hook's panic reached
/// `try_start`'s caller.
fn shut_down_with_panicking_reads(
    engine: &TokioUringEngine,
    pool: &BufferPool,
    file: &TokioUringFile,
) -> (usize, bool) {
    let engine = PanicOnFinish::new(engine.clone(), 0);
    let reading = std::cell::Cell::new(0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        try_start(async {
            for r in 0..READS as u64 {
                let first = r * COMBINE as u64;
                let mut s = ReadStream::builder(pool, engine.clone(), file.clone())
                    .max_ios(0)
                    .io_combine_limit(COMBINE)
                    .full(true)
                    .build(source::forward(first..first + COMBINE as u64))
                    .expect("build");
                assert!(poll_once(&mut s.next()).await.is_pending());
                drop(s); // its read stays in flight
            }
            reading.set(pool.stats().reading);
            // The read tasks run once: each waits for its CQE.
            YieldNow(false).await;
        })
        .expect("runtime")
    }));
    (reading.get(), r.is_err())
}

/// Reads blocks `N..2N` into the pool's frames, all of them (the pool has
/// `N`), and returns the guards.
fn hold_other_blocks(
    engine: &TokioUringEngine,
    pool: &BufferPool,
    file: &TokioUringFile,
) -> Vec<PageGuard> {
    try_start(async {
        let mut s = ReadStream::builder(pool, engine.clone(), file.clone())
            .max_ios(READS)
            .io_combine_limit(COMBINE)
            .full(true)
            .build(source::forward(N..2 * N))
            .expect("build");
        let mut held = Vec::with_capacity(N as usize);
        while let Some(page) = s.next().await {
            // Checked by the caller, later: the re-read must be over fast,
            // while reads of the first runtime may still be in flight.
            held.push(page.expect("re-read"));
        }
        assert_eq!(held.len() as u64, N);
        held
    })
    .expect("runtime")
}

/// 64 reads of 2 MiB are in flight when the runtime shuts down, and the
/// first one's finish hook panics as tokio-uring drops it. The panic
/// reaches `try_start`'s caller (no abort), nothing is left pinned or being
/// read, and every frame, read again for other blocks and held, keeps its
/// bytes afterwards. Several rounds, O_DIRECT and buffered.
#[test]
fn hook_panic_at_shutdown_never_frees_frames_under_the_kernel() {
    let Some(engine) = engine_or_skip("hook_panic_at_shutdown_never_frees_frames_under_the_kernel")
    else {
        return;
    };
    let tmp = StampedFile::new("panic-shutdown", 2 * N, BS);
    let seed = tmp.seed();
    let pool = BufferPool::new(N as usize, BS).expect("pool");
    // The other blocks are read buffered from the page cache: a copy that
    // is over at once, long before reads still queued at the device.
    let cached = TokioUringFile::open(tmp.path()).expect("open");
    for round in 0..3 {
        for direct in [true, false] {
            let what = format!("round {round}, direct={direct}");
            let file = if direct {
                TokioUringFile::open_direct(tmp.path(), BS)
            } else {
                evict(tmp.path(), N * BS as u64);
                TokioUringFile::open(tmp.path())
            }
            .expect("open");
            let (reading, panicked) = shut_down_with_panicking_reads(&engine, &pool, &file);
            assert_eq!(reading, N as usize, "{what}: not every read was started");
            assert!(
                panicked,
                "{what}: the hook's panic did not reach try_start's caller"
            );
            let ps = pool.stats();
            assert_eq!((ps.pinned, ps.reading), (0, 0), "{what}: {ps}");
            let held = hold_other_blocks(&engine, &pool, &cached);
            std::thread::sleep(Duration::from_millis(300));
            let changed = stamp::wrong_blocks(seed, held.iter().map(|p| (p.block(), &p[..])));
            assert!(
                changed.is_empty(),
                "{what}: {} of {N} held pages changed under their guards (first: block {})",
                changed.len(),
                changed[0],
            );
        }
    }
}

/// Starts `READS` reads of `COMBINE` blocks (blocks `0..N`, one stream
/// each, no hook of ours) and ends the runtime with them in flight. Sets
/// `started` once every read is in flight. Returns the frames that were
/// being read then.
fn shut_down_with_reads_in_flight(
    engine: &TokioUringEngine,
    pool: &BufferPool,
    file: &TokioUringFile,
    started: &AtomicBool,
) -> usize {
    try_start(async {
        for r in 0..READS as u64 {
            let first = r * COMBINE as u64;
            let mut s = ReadStream::builder(pool, engine.clone(), file.clone())
                .max_ios(0)
                .io_combine_limit(COMBINE)
                .full(true)
                .build(source::forward(first..first + COMBINE as u64))
                .expect("build");
            assert!(poll_once(&mut s.next()).await.is_pending());
            drop(s); // its read stays in flight
        }
        let reading = pool.stats().reading;
        started.store(true, Ordering::SeqCst);
        reading
    })
    .expect("runtime")
}

/// Waits (at most 30 s) until `started`, then until no frame of `pool` is
/// being read, and reads blocks `N..2N` into every frame at once, holding
/// the guards. `None` if the frames never came free.
fn claim_frames_once_free(
    engine: &TokioUringEngine,
    pool: &BufferPool,
    file: &TokioUringFile,
    started: &AtomicBool,
) -> Option<Vec<PageGuard>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.load(Ordering::SeqCst) || pool.stats().reading > 0 {
        if Instant::now() > deadline {
            return None;
        }
        std::hint::spin_loop();
    }
    Some(hold_other_blocks(engine, pool, file))
}

/// 64 reads of 2 MiB are in flight when one thread's tokio-uring runtime
/// shuts down, while a second thread waits for the pool's frames to come
/// free, reads other blocks into all of them and holds the guards. The
/// frames of the first thread's reads may come free only once the kernel
/// is done with them: no held page may change afterwards. (tokio-uring's
/// driver drops the data of every operation whose task is gone before it
/// cancels them and waits for their completions; the second thread then
/// takes frames the kernel is still reading into.) Several rounds, O_DIRECT
/// and buffered (evicted), as the race needs the kernel still writing.
#[test]
fn frames_in_flight_at_shutdown_stay_out_of_use_until_the_kernel_is_done() {
    let Some(engine) =
        engine_or_skip("frames_in_flight_at_shutdown_stay_out_of_use_until_the_kernel_is_done")
    else {
        return;
    };
    let tmp = StampedFile::new("shutdown-race", 2 * N, BS);
    let seed = tmp.seed();
    let pool = BufferPool::new(N as usize, BS).expect("pool");
    let cached = TokioUringFile::open(tmp.path()).expect("open");
    for round in 0..3 {
        for direct in [true, false] {
            let what = format!("round {round}, direct={direct}");
            let file = if direct {
                TokioUringFile::open_direct(tmp.path(), BS)
            } else {
                evict(tmp.path(), N * BS as u64);
                TokioUringFile::open(tmp.path())
            }
            .expect("open");
            let started = AtomicBool::new(false);
            let (reading, held) = std::thread::scope(|s| {
                let other = s.spawn(|| claim_frames_once_free(&engine, &pool, &cached, &started));
                let reading = shut_down_with_reads_in_flight(&engine, &pool, &file, &started);
                (reading, other.join().expect("second thread"))
            });
            assert_eq!(reading, N as usize, "{what}: not every read was started");
            let held = held.unwrap_or_else(|| panic!("{what}: the frames never came free"));
            // Long after any read of the first thread would have ended.
            std::thread::sleep(Duration::from_millis(300));
            let changed = stamp::wrong_blocks(seed, held.iter().map(|p| (p.block(), &p[..])));
            assert!(
                changed.is_empty(),
                "{what}: {} of {N} held pages changed under their guards (first: block {})",
                changed.len(),
                changed[0],
            );
            drop(held);
            let ps = pool.stats();
            assert_eq!((ps.pinned, ps.reading), (0, 0), "{what}: {ps}");
        }
    }
}
