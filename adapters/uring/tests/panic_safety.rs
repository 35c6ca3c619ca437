//! User code that panics (a read's finish hook) while the driver still has
//! reads in flight must never make it hand memory back before the kernel is
//! done with it: the frames of a read whose completion has not come stay
//! out of use, whatever panics — also when the panic's payload panics as it
//! is dropped.

mod common;

use common::{assert_idle, evict, one_read_stream, open, poll_once, runtime_or_skip};
use futures::StreamExt;
use pagestream::testing::{stamp, StampedFile};
use pagestream::{source, BufferPool, IoEngine, PageGuard, ReadRequest, ReadStream};
use pagestream_uring::{UringEngine, UringFile, UringRuntime};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// 16 KiB blocks, 128 to a read: 2 MiB reads.
const BS: usize = 16 << 10;
const COMBINE: usize = 128;
/// Reads in flight when the runtime is dropped.
const READS: usize = 64;
/// Blocks those reads cover (128 MiB), and the pool's frames.
const N: u64 = (READS * COMBINE) as u64;

/// A panic payload whose own drop panics.
struct BadPayload;

impl Drop for BadPayload {
    fn drop(&mut self) {
        panic!("BadPayload: this panic payload's drop panics on purpose");
    }
}

/// Gives every read a finish hook that, once `armed`, records in
/// `reading_seen` the most frames its pool had still being read when a
/// hook ran (the hook's own frames are given back before it runs), then
/// panics with a [`BadPayload`].
#[derive(Clone)]
struct PanickingHooks {
    inner: UringEngine,
    pool: BufferPool,
    armed: Arc<AtomicBool>,
    reading_seen: Arc<AtomicUsize>,
}

impl IoEngine for PanickingHooks {
    type File = UringFile;

    fn start_read(&self, file: &UringFile, mut req: ReadRequest) {
        let (pool, armed, seen) = (
            self.pool.clone(),
            Arc::clone(&self.armed),
            Arc::clone(&self.reading_seen),
        );
        req.on_finish(move |_| {
            if armed.load(Ordering::SeqCst) {
                seen.fetch_max(pool.stats().reading, Ordering::SeqCst);
                std::panic::panic_any(BadPayload);
            }
        });
        self.inner.start_read(file, req);
    }

    fn name(&self) -> &'static str {
        "panicking-hooks"
    }
}

/// Starts `READS` reads of `READS × COMBINE` blocks (blocks `0..N`) whose
/// hooks panic (with a payload whose drop panics) once the runtime is
/// being dropped, panics in the future with them in flight, and drops the
/// runtime (which must wait for every completion, whatever the hooks and
/// their payloads do). Returns the reads that were in flight, and the most
/// frames a hook saw still being read.
fn drop_runtime_with_panicking_reads(pool: &BufferPool, file: &UringFile) -> (usize, usize) {
    // Every buffered read in the ring: after an eviction, the kernel's
    // read-ahead behind one read may cache the next one's blocks before it
    // starts, and a cached read would be copied as it starts.
    let rt = UringRuntime::builder()
        .entries(2 * READS as u32)
        .nowait(false)
        .build()
        .expect("runtime");
    let engine = PanickingHooks {
        inner: rt.engine(),
        pool: pool.clone(),
        armed: Arc::new(AtomicBool::new(false)),
        reading_seen: Arc::new(AtomicUsize::new(0)),
    };
    let reading = std::cell::Cell::new(0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
            // One stream per read: each starts its first read of `COMBINE`
            // blocks on its first poll, and a stream's budget at `max_ios`
            // 0 is one read, so together they claim exactly the pool.
            for r in 0..READS as u64 {
                let first = r * COMBINE as u64;
                let mut s = one_read_stream(pool, engine.clone(), file, first, COMBINE);
                assert!(poll_once(&mut s.next()).await.is_pending());
                drop(s); // its read stays in flight
            }
            reading.set(pool.stats().reading);
            panic!("the workload fails with reads in flight");
        })
    }));
    assert!(r.is_err());
    let (armed, seen) = (engine.armed, engine.reading_seen);
    // The engine holds the driver: it goes with the runtime only then.
    drop(engine.inner);
    armed.store(true, Ordering::SeqCst);
    // The hooks panic while the driver cancels the reads; the first panic
    // reaches whoever drops the runtime, the others are dropped (their
    // payloads' panics caught).
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(rt)));
    match dropped {
        Ok(()) => panic!("the hooks' panic did not reach drop"),
        Err(p) => {
            let bad = p.is::<BadPayload>();
            // Its drop would panic here; it is a test's payload.
            std::mem::forget(p);
            assert!(bad, "drop unwound with another panic than the first hook's");
        }
    }
    (reading.get(), seen.load(Ordering::SeqCst))
}

/// Reads blocks `N..2N` (a different stamp in every page) into the pool's
/// frames, all of them (the pool has `N`), and returns the guards.
fn hold_other_blocks(pool: &BufferPool, file: &UringFile) -> Vec<PageGuard> {
    let rt = UringRuntime::new().expect("runtime");
    rt.block_on(async {
        let mut s = ReadStream::builder(pool, rt.engine(), file.clone())
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
}

/// 64 reads of 2 MiB are in flight when their finish hooks panic inside
/// the runtime's drop, with payloads whose drop panics. Every frame is then read again for other
/// blocks and held: none may change under its guard afterwards. (A drop
/// that unwinds out of its wait for completions gives the frames of
/// unfinished reads back while the kernel is still writing into them; the
/// pages then change under their guards.) The race needs the kernel to be
/// still writing, so it runs a few rounds, O_DIRECT and buffered (with the
/// first blocks evicted from the page cache).
#[test]
fn hook_panic_in_drop_never_frees_frames_under_the_kernel() {
    if runtime_or_skip("hook_panic_in_drop_never_frees_frames_under_the_kernel").is_none() {
        return;
    }
    let tmp = StampedFile::new("panic-drop", 2 * N, BS);
    let seed = tmp.seed();
    let pool = BufferPool::new(N as usize, BS).expect("pool");
    // The other blocks are read buffered from the page cache (where writing
    // the file left them): a copy that is over at once, long before reads
    // of the first runtime still queued at the device would end.
    let cached = open(tmp.path(), BS, false).expect("open");
    // The most frames a hook saw still being read, in any round: some
    // round must have had reads in flight as the hooks panicked, or the
    // test proved nothing.
    let mut in_flight_seen = 0;
    for round in 0..3 {
        for direct in [true, false] {
            let what = format!("round {round}, direct={direct}");
            let file = open(tmp.path(), BS, direct).expect("open");
            if !direct {
                evict(tmp.path(), N * BS as u64);
            }
            let (reading, seen) = drop_runtime_with_panicking_reads(&pool, &file);
            assert_eq!(reading, N as usize, "{what}: not every read was started");
            in_flight_seen = in_flight_seen.max(seen);
            assert_idle(&pool, &what);
            let held = hold_other_blocks(&pool, &cached);
            // Long after any read of the first runtime would have ended.
            std::thread::sleep(Duration::from_millis(300));
            let changed = stamp::wrong_blocks(seed, held.iter().map(|p| (p.block(), &p[..])));
            assert!(
                changed.is_empty(),
                "{what}: {} of {N} held pages changed under their guards (first: block {})",
                changed.len(),
                changed[0],
            );
            drop(held);
            // Blocks 0..N were cancelled, never published.
            assert!((0..N).all(|b| !pool.contains(file_id(&file), b)), "{what}");
        }
    }
    assert!(
        in_flight_seen > 0,
        "no round had reads still in flight when the hooks panicked"
    );
}

fn file_id(file: &UringFile) -> pagestream::FileId {
    pagestream::EngineFile::id(file)
}
