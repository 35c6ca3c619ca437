//! `EngineHints::full_look_ahead`: a stream over an engine that asks for it
//! has `max_ios` reads in flight from its first round trip (full-sized,
//! the first one too, or smaller ones on a small pool), instead of ramping
//! up from one block;
//! without it the first round trip is one block. A hot rescan still takes
//! the fast path.
//!
//! Deterministic, no clocks: the engine holds every read
//! (`Stall::every_read`); a round is one storage round trip.

use futures::Stream;
use pagestream::source::Forward;
use pagestream::testing::{stamp, MemEngine, MemFile, Stall};
use pagestream::{source, BufferPool, EngineHints, IoEngine, ReadRequest, ReadStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

const BS: usize = 8192;

/// `Stall` whose hints ask for full look-ahead, or not.
#[derive(Clone)]
struct Far {
    stall: Stall<MemEngine>,
    full: bool,
}

impl IoEngine for Far {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        self.stall.start_read(file, req);
    }
    fn hints(&self, file: &MemFile) -> EngineHints {
        self.stall.hints(file).with_full_look_ahead(self.full)
    }
    fn name(&self) -> &'static str {
        "far"
    }
}

#[derive(Default)]
struct Woken(AtomicBool);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs the stream in rounds (see `remote_small_pool.rs`), checking every
/// page; returns the reads in flight at each round trip.
fn rounds(
    s: &mut ReadStream<Far, Forward>,
    seed: u64,
    n: u64,
    stall: &Stall<MemEngine>,
) -> Vec<usize> {
    let woken = Arc::new(Woken::default());
    let waker = Waker::from(Arc::clone(&woken));
    let mut cx = Context::from_waker(&waker);
    let mut next = 0;
    let mut in_flight = Vec::new();
    loop {
        woken.0.store(false, Ordering::Relaxed);
        match Pin::new(&mut *s).poll_next(&mut cx) {
            Poll::Ready(Some(p)) => {
                let p = p.expect("page");
                assert_eq!(p.block(), next);
                assert!(stamp::check(seed, next, &p));
                next += 1;
            }
            Poll::Ready(None) => {
                assert_eq!(next, n, "ended early");
                return in_flight;
            }
            Poll::Pending if woken.0.load(Ordering::Relaxed) => {}
            Poll::Pending => {
                assert!(stall.held() > 0, "waits with nothing in flight");
                in_flight.push(s.reads_in_flight());
                stall.release_all();
            }
        }
    }
}

fn scan(full: bool, frames: usize) -> (Vec<usize>, pagestream::StreamStats) {
    let mem = MemEngine::new();
    let stall = Stall::every_read(mem.clone());
    let n = 1000;
    let file = mem.create_stamped(n, BS);
    let seed = file.seed();
    let pool = BufferPool::new(frames, BS).unwrap();
    let engine = Far {
        stall: stall.clone(),
        full,
    };
    let mut s = ReadStream::builder(&pool, engine, file)
        .max_ios(8)
        .io_combine_limit(16)
        .build(source::forward(0..n))
        .unwrap();
    let r = rounds(&mut s, seed, n, &stall);
    (r, s.stats())
}

#[test]
fn full_look_ahead_starts_with_max_ios_full_sized_reads() {
    let (r, st) = scan(true, 1024);
    // 8 reads of 16 blocks from the first round trip, the first one too:
    // ⌈1000 / 16⌉ = 63 reads in ⌈1000 / 128⌉ = 8 round trips.
    assert_eq!(r[0], 8, "{r:?}");
    assert_eq!(r.len(), 8, "{r:?}\n{st}");
    assert_eq!((st.reads, st.max_blocks_per_read), (63, 16), "{st}");
    // The ramp from one block takes round trips to reach that.
    let (ramp, _) = scan(false, 1024);
    assert_eq!(ramp[0], 1, "{ramp:?}");
    assert!(ramp.len() > r.len(), "ramp {ramp:?}, full {r:?}");
}

#[test]
fn full_look_ahead_on_a_small_pool_shrinks_reads_not_their_number() {
    // 64 frames for 8 reads of 16 blocks: reads of 8 blocks, 8 of them.
    let (r, st) = scan(true, 64);
    assert_eq!(r[0], 8, "{r:?}");
    // ⌈1000 / 8⌉ = 125, one more where a read meets frames still held.
    assert_eq!(st.max_blocks_per_read, 8, "{st}");
    assert!(st.reads <= 126, "{st}");
    assert!(st.max_in_flight >= 8, "{st}");
}

#[test]
fn full_look_ahead_rescans_a_hot_file_on_the_fast_path() {
    let mem = MemEngine::new();
    let stall = Stall::every_read(mem.clone());
    let n = 200;
    let file = mem.create_stamped(n, BS);
    let seed = file.seed();
    let pool = BufferPool::new(256, BS).unwrap();
    let engine = Far {
        stall: stall.clone(),
        full: true,
    };
    for pass in 0..2 {
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(8)
            .io_combine_limit(16)
            .build(source::forward(0..n))
            .unwrap();
        let r = rounds(&mut s, seed, n, &stall);
        let st = s.stats();
        if pass == 1 {
            assert!(r.is_empty(), "a hot scan waited: {r:?}");
            assert!(st.fast_path_pages >= n - 2, "{st}");
        }
    }
}

#[test]
fn full_look_ahead_follows_every_read_of_another_stream_at_once() {
    let mem = MemEngine::new();
    let stall = Stall::every_read(mem.clone());
    let n = 1000;
    let file = mem.create_stamped(n, BS);
    let pool = BufferPool::new(1024, BS).unwrap();
    let engine = Far {
        stall: stall.clone(),
        full: true,
    };
    // READ_STREAM_FULL: B's first look-ahead fills its first read's worth
    // of A's blocks before any check of the pool.
    let build = || {
        ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(2)
            .io_combine_limit(8)
            .full(true)
            .build(source::forward(0..n))
            .unwrap()
    };
    let waker = Waker::from(Arc::new(Woken::default()));
    let mut cx = Context::from_waker(&waker);
    let mut a = build();
    assert!(Pin::new(&mut a).poll_next(&mut cx).is_pending());
    let held = stall.held();
    assert_eq!(held, 2, "A's first look-ahead: 2 reads");
    // B finds A's 16 blocks being read: it waits for all of them (so none
    // of A's reads is left without a stream wanting it), and its pin budget
    // ((2 + 1) × 8 = 24) has room for one read of its own after them.
    let mut b = build();
    assert!(Pin::new(&mut b).poll_next(&mut cx).is_pending());
    let st = b.stats();
    assert_eq!(st.shared_reads, 16, "{st}");
    assert_eq!(stall.held(), held + 1, "B's read after A's blocks: {st}");
    assert_eq!(st.blocks_read, 8, "{st}");
    drop((a, b));
    stall.release_all();
}
