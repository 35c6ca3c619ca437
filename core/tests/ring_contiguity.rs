//! A ring under deep look-ahead: it grows (rather than letting the scan
//! cycle through the whole pool) and keeps handing out runs of adjacent
//! frames, so most reads reach the engine as one contiguous buffer; and
//! `RingSize::BULKREAD` starts at PostgreSQL 18's size; a stream whose
//! reads are served from the page cache cycles through only the few frames
//! its look-ahead pins.

use futures::executor::block_on;
use futures::StreamExt;
use pagestream::testing::conformance::drain_verify;
use pagestream::testing::{stamp, Delayed, MemEngine, MemFile, ThreadTimer};
use pagestream::{source, BufferPool, IoEngine, ReadRequest, ReadStream, RingSize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The in-memory engine behind a round trip (so that the consumer waits
/// and the look-ahead deepens), counting the buffers each read hands over.
#[derive(Clone)]
struct Counting {
    mem: Delayed<MemEngine>,
    reads: Arc<AtomicU64>,
    one_buffer: Arc<AtomicU64>,
}

impl IoEngine for Counting {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, mut req: ReadRequest) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if req.buffers_mut().len() == 1 {
            self.one_buffer.fetch_add(1, Ordering::Relaxed);
        }
        self.mem.start_read(file, req);
    }
    fn name(&self) -> &'static str {
        "counting"
    }
}

/// The in-memory engine, saying every read came from the page cache (as
/// an engine that copies cached reads inline does).
#[derive(Clone)]
struct Cached(MemEngine);

impl IoEngine for Cached {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, mut req: ReadRequest) {
        req.set_served_from_cache(true);
        self.0.start_read(file, req);
    }
    fn name(&self) -> &'static str {
        "cached"
    }
}

/// Scans 4000 cached blocks through a BULKREAD ring (288 frames) of a
/// large pool, checking every page, the consumer holding the last `hold`
/// pages it was given; returns the stream's stats, its ring's length and
/// the frames of the pool that hold a block afterwards.
fn cached_scan(hold: usize) -> (pagestream::StreamStats, usize, usize) {
    let mem = MemEngine::new();
    let n = 4000;
    let file = mem.create_stamped(n, 8192);
    let seed = file.seed();
    let pool = BufferPool::new(16384, 8192).unwrap();
    let mut s = ReadStream::builder(&pool, Cached(mem), file)
        .max_ios(16)
        .io_combine_limit(16)
        .ring(Some(RingSize::BULKREAD))
        .build(source::forward(0..n))
        .unwrap();
    assert_eq!(s.ring_len(), Some(288));
    block_on(async {
        let mut held = std::collections::VecDeque::new();
        let mut b = 0;
        while let Some(p) = s.next().await {
            let p = p.unwrap();
            assert!(p.block() == b && stamp::check(seed, b, &p), "block {b}");
            b += 1;
            held.push_back(p);
            if held.len() > hold {
                held.pop_front();
            }
        }
        assert_eq!(b, n);
    });
    let st = s.stats();
    assert_eq!(st.cached_reads, st.reads, "{st}");
    (st, s.ring_len().unwrap(), pool.stats().valid)
}

/// A scan whose reads are all cached keeps one read or so ahead: through a
/// BULKREAD ring of 288 frames it reuses the two reads' worth its
/// look-ahead pins, not the whole ring (whose frames, cycled through, would
/// leave the CPU's cache before they are reused).
#[test]
fn a_cached_scan_cycles_through_a_few_frames_of_its_ring() {
    let (st, _, valid) = cached_scan(0);
    assert!(
        valid <= 64,
        "the scan went through {valid} frames, more than its look-ahead pins: {st}"
    );
}

/// The same scan, its consumer holding the last 64 pages it was given: the
/// ring's window widens to take them in and stays wide, so the scan takes
/// no frames from the rest of the pool (at most the ring's).
#[test]
fn a_consumer_holding_pages_keeps_the_scan_in_its_ring() {
    let (st, ring, valid) = cached_scan(64);
    assert!(
        valid <= ring,
        "the scan went through {valid} frames, more than its ring's {ring}: {st}"
    );
}

/// What a scan of 4000 blocks through a ring of `size`, on the in-memory
/// engine behind a round trip of 50 µs (none cached), did.
struct RingScan {
    stats: pagestream::StreamStats,
    ring: usize,
    valid: usize,
    reads: u64,
    one_buffer: u64,
}

fn counted_scan(size: RingSize) -> RingScan {
    let mem = MemEngine::new();
    let n = 4000;
    let file = mem.create_stamped(n, 8192);
    let seed = file.seed();
    let engine = Counting {
        mem: Delayed::new(mem, Arc::new(ThreadTimer::new()), Duration::from_micros(50)),
        reads: Arc::default(),
        one_buffer: Arc::default(),
    };
    let pool = BufferPool::new(16384, 8192).unwrap();
    let mut s = ReadStream::builder(&pool, engine.clone(), file)
        .max_ios(16)
        .io_combine_limit(16)
        .ring(Some(size))
        .build(source::forward(0..n))
        .unwrap();
    let expect: Vec<u64> = (0..n).collect();
    block_on(drain_verify(&mut s, seed, &expect, "ring scan"));
    RingScan {
        stats: s.stats(),
        ring: s.ring_len().unwrap(),
        valid: pool.stats().valid,
        reads: engine.reads.load(Ordering::Relaxed),
        one_buffer: engine.one_buffer.load(Ordering::Relaxed),
    }
}

#[test]
fn deep_look_ahead_grows_the_ring_in_runs_of_adjacent_frames() {
    // PostgreSQL 16's BULKREAD ring: smaller than the look-ahead.
    let RingScan {
        stats: st,
        ring,
        valid,
        reads,
        one_buffer: one,
    } = counted_scan(RingSize::Bytes(256 * 1024));
    let budget = 17 * 16;
    assert!(
        st.max_distance > 32,
        "look-ahead never went past the ring: {st}"
    );
    assert!(ring > 32 && ring <= budget + 16, "ring of {ring} frames");
    assert!(
        valid <= budget + 16,
        "the scan flushed {valid} frames of the pool"
    );
    assert!(
        one * 10 >= reads * 8,
        "only {one} of {reads} reads were one buffer"
    );
    eprintln!("ring {ring} frames, {one}/{reads} reads in one buffer, {valid} frames valid\n{st}");
}

/// A scan that waits for its reads ramps its look-ahead up to a BULKREAD
/// ring's size, and its reads still reach the engine as one buffer each:
/// the ring's slots keep runs of adjacent frames.
#[test]
fn a_cold_scan_through_a_bulkread_ring_reads_into_adjacent_frames() {
    let r = counted_scan(RingSize::BULKREAD);
    assert!(
        r.one_buffer * 10 >= r.reads * 9,
        "only {} of {} reads were one buffer: {}",
        r.one_buffer,
        r.reads,
        r.stats
    );
}

/// `RingSize::BULKREAD` holds 256 KiB plus `max_ios` reads of
/// `io_combine_limit` blocks from the start, but no more than the stream's
/// pin budget plus one read, never less than 256 KiB, and at most the pool.
#[test]
fn bulkread_ring_starts_with_room_for_max_ios_reads() {
    let mem = MemEngine::new();
    let file = mem.create_stamped(64, 8192);
    let ring_len = |frames: usize, max_ios: usize, combine: usize| {
        let pool = BufferPool::new(frames, 8192).unwrap();
        let s = ReadStream::builder(&pool, mem.clone(), file.clone())
            .max_ios(max_ios)
            .io_combine_limit(combine)
            .ring(Some(RingSize::BULKREAD))
            .build(source::forward(0..64))
            .unwrap();
        s.ring_len().unwrap()
    };
    // 32 frames of 256 KiB, plus 16 reads of 16 or 32 blocks.
    assert_eq!(ring_len(16384, 16, 16), 32 + 16 * 16);
    assert_eq!(ring_len(16384, 16, 32), 32 + 16 * 32);
    // The pin budget plus one read: (4 + 1) × 8 + 8 frames, not 32 + 4 × 8.
    assert_eq!(ring_len(16384, 4, 8), 48);
    // Never under 256 KiB: (16 + 1) × 1 + 1 frames would be 18.
    assert_eq!(ring_len(16384, 16, 1), 32);
    // The pool.
    assert_eq!(ring_len(100, 16, 16), 100);
}
