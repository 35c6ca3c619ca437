//! Remote storage on a small pool. PostgreSQL 17 once cut look-ahead to one
//! block here (a 16-buffer ring and `shared_buffers ÷ backends`), making
//! scans 5x slower at 0.2 ms per read. pagestream must keep many reads in
//! flight on a 1 MiB pool for one stream, and several for each of 40.
//!
//! Deterministic, no clocks: the engine holds every read (`Stall::every_read`)
//! and releases them in rounds. A round is one storage round trip; what a
//! stream has held when it has to wait is exactly what it keeps in flight.

use futures::Stream;
use pagestream::source::Forward;
use pagestream::testing::{stamp, MemEngine, Stall};
use pagestream::{source, BufferPool, Limit, ReadStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

const BS: usize = 8192;

type Remote = ReadStream<Stall<MemEngine>, Forward>;

/// A waker that notes that it was woken.
#[derive(Default)]
struct Woken(AtomicBool);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Polls every stream until it waits or ends (verifying pages), then
/// releases all held reads; repeats. Returns the rounds (round trips) taken.
/// A stream that yields to the runtime (its yield budget spent) wakes its
/// task before returning `Pending`; one that waits for a read does not (the
/// engine holds every read until the round ends). So a `Pending` with the
/// task woken is not a round trip.
fn run_in_rounds(streams: &mut [Remote], seeds: &[u64], n: u64, stall: &Stall<MemEngine>) -> u64 {
    let woken = Arc::new(Woken::default());
    let waker = Waker::from(Arc::clone(&woken));
    let mut cx = Context::from_waker(&waker);
    let mut next = vec![0u64; streams.len()];
    let mut rounds = 0;
    loop {
        let mut live = false;
        for (k, s) in streams.iter_mut().enumerate() {
            loop {
                woken.0.store(false, Ordering::Relaxed);
                match Pin::new(&mut *s).poll_next(&mut cx) {
                    Poll::Ready(Some(p)) => {
                        let p = p.unwrap_or_else(|e| panic!("stream {k}: {e}"));
                        assert_eq!(p.block(), next[k]);
                        assert!(stamp::check(seeds[k], next[k], &p));
                        next[k] += 1;
                    }
                    Poll::Ready(None) => {
                        assert_eq!(next[k], n, "stream {k} ended early");
                        break;
                    }
                    Poll::Pending if woken.0.load(Ordering::Relaxed) => {}
                    Poll::Pending => {
                        live = true;
                        break;
                    }
                }
            }
        }
        if !live {
            return rounds;
        }
        assert!(
            stall.held() > 0,
            "streams wait with nothing in flight: a hang"
        );
        stall.release_all();
        rounds += 1;
    }
}

fn pool_1mib() -> BufferPool {
    let pool = BufferPool::builder()
        .capacity_bytes(1 << 20)
        .build()
        .unwrap();
    assert_eq!(pool.frames(), 128);
    pool
}

#[test]
fn one_stream_on_a_1mib_pool_keeps_the_pool_in_flight() {
    let mem = MemEngine::new();
    let stall = Stall::every_read(mem.clone());
    let n = 3000;
    let file = mem.create_stamped(n, BS);
    let seed = file.seed();
    let pool = pool_1mib();
    let mut s = [ReadStream::builder(&pool, stall.clone(), file)
        .max_ios(100)
        .io_combine_limit(16)
        .build(source::forward(0..n))
        .unwrap()];
    let rounds = run_in_rounds(&mut s, &[seed], n, &stall);
    let st = s[0].stats();
    eprintln!("one stream, 1 MiB pool: {rounds} round trips\n{st}");
    // Frames bind (not a ring, not a per-backend share); reads shrink to
    // ⌈128 / 100⌉ = 2 blocks so that up to 64 are in flight, covering the pool.
    assert_eq!(st.binding_limit(), Some(Limit::Frames), "{st}");
    assert_eq!((st.max_distance, st.max_blocks_per_read), (128, 2), "{st}");
    assert!(st.max_in_flight >= 60, "look-ahead collapsed: {st}");
    // One block at a time would take 3000 round trips; the pool's 128
    // frames allow ⌈3000 / 128⌉ = 24, plus a ramp of a few.
    assert!(rounds <= 24 + 8, "{rounds} round trips: {st}");
}

#[test]
fn forty_streams_on_a_1mib_pool_each_keep_several_reads_in_flight() {
    let mem = MemEngine::new();
    let stall = Stall::every_read(mem.clone());
    let pool = pool_1mib();
    let n = 200;
    let files: Vec<_> = (0..40).map(|_| mem.create_stamped(n, BS)).collect();
    let seeds: Vec<_> = files.iter().map(|f| f.seed()).collect();
    let mut streams: Vec<_> = files
        .iter()
        .map(|f| {
            ReadStream::builder(&pool, stall.clone(), f.clone())
                .max_ios(100)
                .io_combine_limit(16)
                .build(source::forward(0..n))
                .unwrap()
        })
        .collect();
    let rounds = run_in_rounds(&mut streams, &seeds, n, &stall);
    let least = streams.iter().map(|s| s.stats().max_in_flight).min();
    eprintln!("40 streams, 1 MiB pool: {rounds} round trips, fewest reads in flight {least:?}");
    for s in &streams {
        let st = s.stats();
        // A fair share is 128 / 40 = 3 frames: three one-block reads.
        assert!(
            st.max_in_flight >= 3,
            "a stream was cut to {} reads in flight: {st}",
            st.max_in_flight
        );
        assert_eq!(st.errors, 0);
    }
    assert!(rounds <= n / 3 + 8, "{rounds} round trips");
}

#[test]
fn a_synchronized_pack_reads_with_the_whole_pool_not_a_share() {
    // Ten scans of one file moving together (synchronized scans joined at
    // the same block), polled in turn: whoever gets to a block first reads
    // it, the others find the read in progress or done (PostgreSQL 17's pin
    // limit made this case crawl: seed 003's 10 synchronized scans).
    let mem = MemEngine::new();
    let stall = Stall::every_read(mem.clone());
    let pool = pool_1mib();
    let n = 3000;
    let file = mem.create_stamped(n, BS);
    let seed = file.seed();
    let mut streams: Vec<_> = (0..10)
        .map(|_| {
            ReadStream::builder(&pool, stall.clone(), file.clone())
                .max_ios(100)
                .io_combine_limit(16)
                .build(source::forward(0..n))
                .unwrap()
        })
        .collect();
    let rounds = run_in_rounds(&mut streams, &[seed; 10], n, &stall);
    for (k, s) in streams.iter().enumerate() {
        let st = s.stats();
        eprintln!(
            "stream {k}: reads {} blocks {} shared {} hits {} max in flight {} max distance {}",
            st.reads, st.blocks_read, st.shared_reads, st.hits, st.max_in_flight, st.max_distance
        );
    }
    let most = streams.iter().map(|s| s.stats().max_in_flight).max();
    let shared: u64 = streams.iter().map(|s| s.stats().shared_reads).sum();
    eprintln!(
        "10 streams in a pack, 1 MiB pool: {rounds} round trips, most reads in flight {most:?}, \
         {shared} blocks found being read, {} bytes read",
        mem.bytes_read()
    );
    // Every block read once, by whoever got there first.
    assert_eq!(mem.bytes_read(), n * BS as u64);
    // A fair share is 12 frames: ⌈3000 / 12⌉ = 250 round trips, and more if
    // followers' distance decayed to one block on hits (the reader's pages
    // would be evicted before they got there, and read again). Followers
    // look ahead over blocks being read as over their own reads, only
    // readers claim frames, and hits lower the distance only after a budget
    // of pages since the last read (PostgreSQL 19's hold-off), so a stream
    // that falls behind the reader keeps its look-ahead: about 46.
    assert!(rounds <= 60, "{rounds} round trips: the pack crawled");
    assert!(most >= Some(32), "{most:?} reads in flight at most");
}
