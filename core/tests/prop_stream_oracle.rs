//! Property test of the whole stream — planner, pool, requests — against
//! the naive reader.
//!
//! Oracle: read each block the source names, in order, no look-ahead: the
//! output is the source sequence, each block once, holding its stamp; blocks
//! past the end are errors in place. Sources include ascending runs with
//! holes, which reads may cover (`gap_limit`): their pages are never handed
//! out, and stay in the pool with their own bytes.
//!
//! The engine here holds every request (`Stall::every_read`). The test
//! polls the stream with a no-op waker and, whenever it is pending,
//! completes one held request chosen at random — so completions arrive in random order —
//! with a random short count now and then (the remainder goes back into the
//! queue, as an engine must issue it). Several streams may share the pool.
//!
//! Each source is watched: it must never be pulled more than the pin budget
//! (plus one block taken but not yet queued) ahead of the pages and errors
//! handed out, and never asked again once it has said `None` (it is not
//! fused: asked again, it would name another block).
//!
//! Not modelled: real threads (see the conformance suite with the latency
//! wrapper), cancellation (conformance `stalled_read_cancelled`).

use futures::task::noop_waker;
use futures::Stream;
use pagestream::source::BlockSource;
use pagestream::testing::{stamp, MemEngine, SplitMix, Stall};
use pagestream::{BufferPool, EngineFile, IoEngine, ReadStream};
use proptest::prelude::*;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// Holds every read until [`pump`] completes it.
type Queue = Stall<MemEngine>;

/// The blocks of `seq`, then `None`, then (if asked again, which the stream
/// must never do) block 0 forever; counts the blocks it named and the calls
/// after its end.
struct Watched {
    seq: std::vec::IntoIter<u64>,
    ended: bool,
    pulled: Arc<AtomicUsize>,
    asked_after_end: Arc<AtomicUsize>,
}

impl BlockSource for Watched {
    type Data = ();
    fn next_block(&mut self) -> Option<(u64, ())> {
        if self.ended {
            self.asked_after_end.fetch_add(1, Ordering::Relaxed);
            return Some((0, ()));
        }
        match self.seq.next() {
            Some(b) => {
                self.pulled.fetch_add(1, Ordering::Relaxed);
                Some((b, ()))
            }
            None => {
                self.ended = true;
                None
            }
        }
    }
}

/// Completes one queued request at random, maybe short.
fn pump(q: &Queue, rng: &mut SplitMix, short_per_mille: u64) -> bool {
    let held = q.held();
    if held == 0 {
        return false;
    }
    let (file, mut req) = q
        .take(rng.below(held as u64) as usize)
        .expect("a held read");
    let data = file.bytes();
    let off = req.offset() as usize;
    let end = (off + req.len_bytes()).min(data.len());
    let mut n = end.saturating_sub(off);
    if n > 1 && rng.below(1000) < short_per_mille {
        n = 1 + rng.below(n as u64 - 1) as usize;
    }
    let copied = req.copy_from(&data[off..off + n]);
    if let Some(rest) = req.complete(Ok(copied)) {
        q.start_read(&file, rest);
    }
    true
}

fn sequences() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec((0u64..80, 1usize..24, 0u8..6), 1..10).prop_map(|runs| {
        let mut v = Vec::new();
        for (start, len, kind) in runs {
            for i in 0..len as u64 {
                v.push(match kind {
                    0 => start + i,
                    1 => start.saturating_sub(i),
                    2 => start,
                    // Ascending with holes (a dense bitmap).
                    3 => start + i + i / 2,
                    4 => start + 3 * i,
                    _ => (start * 11 + i * 17) % 80,
                });
            }
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

    #[test]
    fn streams_match_naive_reader(
        seqs in prop::collection::vec(sequences(), 1..4),
        frames in 16usize..200,
        max_ios in 0usize..6,
        combine in 1usize..17,
        short in 0u64..600,
        seed in any::<u64>(),
        gap_limit in 0usize..4,
    ) {
        let nblocks = 72;
        let mem = MemEngine::new();
        let file = mem.create_stamped(nblocks, 8192);
        let seed_file = file.seed();
        let pool = BufferPool::new(frames, 8192).unwrap();
        let q: Queue = Stall::every_read(MemEngine::new());
        let pulled: Vec<Arc<AtomicUsize>> = seqs.iter().map(|_| Arc::default()).collect();
        let asked_after_end: Vec<Arc<AtomicUsize>> = seqs.iter().map(|_| Arc::default()).collect();
        let mut streams: Vec<_> = seqs
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let src = Watched {
                    seq: s.clone().into_iter(),
                    ended: false,
                    pulled: Arc::clone(&pulled[k]),
                    asked_after_end: Arc::clone(&asked_after_end[k]),
                };
                ReadStream::builder(&pool, q.clone(), file.clone())
                    .max_ios(max_ios)
                    .io_combine_limit(combine)
                    .gap_limit(gap_limit)
                    .build(src)
                    .unwrap()
            })
            .collect();
        let budget = (max_ios + 1) * combine;
        let mut pos = vec![0usize; streams.len()];
        let mut done = vec![false; streams.len()];
        let mut rng = SplitMix::new(seed);
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut idle = 0;
        while done.iter().any(|d| !d) {
            let mut progressed = false;
            for (k, s) in streams.iter_mut().enumerate() {
                if done[k] {
                    continue;
                }
                match Pin::new(&mut *s).poll_next(&mut cx) {
                    Poll::Ready(None) => {
                        prop_assert_eq!(pos[k], seqs[k].len(), "stream {} ended early", k);
                        done[k] = true;
                        progressed = true;
                    }
                    Poll::Ready(Some(item)) => {
                        let want = seqs[k][pos[k]];
                        match item {
                            Ok(page) => {
                                prop_assert_eq!(page.block(), want);
                                prop_assert!(stamp::check(seed_file, want, &page), "block {} bytes", want);
                            }
                            Err(e) => {
                                // Past the end, or the pool is exhausted by
                                // the other streams' look-ahead (a retry
                                // then gets the same block).
                                let kind = pagestream::ReadError::from_io(&e);
                                match kind {
                                    Some(pagestream::ReadError::PastEnd { block, .. }) => {
                                        prop_assert!(want >= nblocks);
                                        prop_assert_eq!(*block, want);
                                    }
                                    Some(pagestream::ReadError::PoolExhausted { .. }) => {
                                        progressed = true;
                                        continue; // same block next time
                                    }
                                    other => prop_assert!(false, "unexpected error {:?}", other),
                                }
                            }
                        }
                        pos[k] += 1;
                        progressed = true;
                    }
                    Poll::Pending => {}
                }
                let ahead = pulled[k].load(Ordering::Relaxed) - pos[k];
                prop_assert!(
                    ahead <= budget + 1,
                    "stream {}: {} blocks pulled ahead of the consumer, budget {}", k, ahead, budget
                );
                prop_assert_eq!(
                    asked_after_end[k].load(Ordering::Relaxed), 0,
                    "stream {}: the source was asked again after it said None", k
                );
            }
            if pump(&q, &mut rng, short) {
                progressed = true;
            }
            idle = if progressed { 0 } else { idle + 1 };
            prop_assert!(idle < 3, "no stream can progress and nothing is in flight: hang");
        }
        for s in &streams {
            let st = s.stats();
            prop_assert!(st.max_in_flight <= max_ios.max(1) as u64);
            prop_assert!(st.max_blocks_per_read <= combine as u64);
        }
        drop(streams);
        while pump(&q, &mut rng, 0) {}
        let ps = pool.stats();
        prop_assert_eq!(ps.pinned, 0, "pins left: {}", ps);
        prop_assert_eq!(ps.reading, 0);
        // Every page the pool kept, the holes read through included, holds
        // its own block: a scan of the whole file, from the pool where it
        // can, finds every stamp.
        let mut all = ReadStream::builder(&pool, MemEngine::new(), file.clone())
            .build(pagestream::source::forward(0..nblocks))
            .unwrap();
        futures::executor::block_on(async {
            use futures::StreamExt;
            let mut b = 0;
            while let Some(page) = all.next().await {
                let page = page.unwrap();
                assert_eq!(page.block(), b);
                assert!(stamp::check(seed_file, b, &page), "block {b} bytes");
                b += 1;
            }
            assert_eq!(b, nblocks);
        });
        let _ = file.id();
    }
}
