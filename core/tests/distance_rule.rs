//! The distance rule through a real stream: the look-ahead deepens only
//! while the consumer waits for its reads. Over an engine whose reads are
//! done as they start (the in-memory engine) the consumer never waits, so
//! the stream keeps about one read pinned, its reads still full-sized; over
//! the same engine behind a round trip it waits, and the distance climbs
//! until `max_ios` reads are in flight.

use futures::executor::block_on;
use pagestream::testing::conformance::drain_verify;
use pagestream::testing::{Delayed, MemEngine, MemFile, ThreadTimer};
use pagestream::{source, BufferPool, IoEngine, ReadStream, StreamStats};
use std::sync::Arc;
use std::time::Duration;

const N: u64 = 3000;
const MAX_IOS: usize = 8;
const COMBINE: usize = 16;

/// Scans `N` stamped blocks of a file of `mem` through `engine`, checking
/// every page.
fn scan<E: IoEngine<File = MemFile>>(mem: &MemEngine, engine: E) -> StreamStats {
    let file = mem.create_stamped(N, 8192).with_kernel_readahead(false);
    let pool = BufferPool::new(1024, 8192).unwrap();
    scan_range(&pool, engine, file, N)
}

/// Scans blocks `0..end` of the stamped `file` through `engine` on `pool`,
/// checking every page.
fn scan_range<E: IoEngine<File = MemFile>>(
    pool: &BufferPool,
    engine: E,
    file: MemFile,
    end: u64,
) -> StreamStats {
    let seed = file.seed();
    let mut s = ReadStream::builder(pool, engine, file)
        .max_ios(MAX_IOS)
        .io_combine_limit(COMBINE)
        .build(source::forward(0..end))
        .unwrap();
    let expect: Vec<u64> = (0..end).collect();
    block_on(drain_verify(&mut s, seed, &expect, "scan"));
    s.stats()
}

#[test]
fn reads_done_before_the_consumer_gets_there_keep_the_look_ahead_short() {
    let mem = MemEngine::new();
    let st = scan(&mem, mem.clone());
    // Only the first read, started when the consumer asks for its page, is
    // unfinished when asked for (a wait, though done by the time the stream
    // looks again), so the distance doubles once; a doubling per read would
    // take it to the pin budget, (8 + 1) × 16 frames.
    assert!(st.max_distance <= 2, "{st}");
    assert!(st.mean_pinned() <= COMBINE as f64, "{st}");
    // The combine distance still makes the reads full-sized (after a ramp
    // of 1, 2, 4 and 8 blocks).
    assert!(st.reads <= N.div_ceil(COMBINE as u64) + 5, "{st}");
    assert_eq!(st.max_blocks_per_read, COMBINE as u64, "{st}");
}

#[test]
fn a_consumer_that_waits_deepens_the_look_ahead_to_max_ios_reads() {
    let mem = MemEngine::new();
    let delayed = Delayed::new(
        mem.clone(),
        Arc::new(ThreadTimer::new()),
        Duration::from_micros(200),
    );
    let st = scan(&mem, delayed);
    assert!(st.waits > 0, "{st}");
    assert_eq!(st.max_distance, ((MAX_IOS + 1) * COMBINE) as u64, "{st}");
    assert_eq!(st.max_in_flight, MAX_IOS as u64, "{st}");
    assert!(st.mean_pinned() > 2.0 * COMBINE as f64, "{st}");
}

#[test]
fn a_cold_stretch_after_a_hot_one_is_read_in_full_sized_reads() {
    // The first half is in the pool (a first scan read it), so the second
    // scan starts on the fast path, at distance 1; its cold half, read
    // inline, never makes it wait. The fast path reads a miss alone: were
    // it taken again after each read, the cold half would be read block by
    // block.
    let mem = MemEngine::new();
    let file = mem.create_stamped(N, 8192).with_kernel_readahead(false);
    let pool = BufferPool::new(4096, 8192).unwrap();
    scan_range(&pool, mem.clone(), file.clone(), N / 2);
    let last = scan_range(&pool, mem, file, N);
    let cold = N / 2;
    assert_eq!((last.hits, last.blocks_read), (N / 2, cold), "{last}");
    assert!(last.fast_path_pages > 0, "{last}");
    assert!(last.reads <= cold.div_ceil(COMBINE as u64) + 5, "{last}");
}
