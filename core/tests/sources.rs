//! Block sources: parallel workers partition the table exactly; a
//! synchronized scan yields every block once, starting where others are.

use pagestream::source::{BlockSource, ParallelScan, SyncScans};
use pagestream::testing::SplitMix;
use proptest::prelude::*;

proptest! {
    #[test]
    fn parallel_workers_get_every_block_exactly_once(nblocks in 0u64..50_000, workers in 1usize..9, seed in any::<u64>()) {
        let scan = ParallelScan::new(nblocks);
        let mut ws: Vec<_> = (0..workers).map(|_| scan.worker()).collect();
        let mut live: Vec<usize> = (0..workers).collect();
        let mut seen = vec![0u8; nblocks as usize];
        let mut per_worker = vec![Vec::new(); workers];
        let mut rng = SplitMix::new(seed);
        while !live.is_empty() {
            let k = rng.below(live.len() as u64) as usize;
            match ws[live[k]].next_block() {
                Some((b, ())) => {
                    seen[b as usize] += 1;
                    per_worker[live[k]].push(b);
                }
                None => { live.swap_remove(k); }
            }
        }
        prop_assert!(seen.iter().all(|&c| c == 1), "a block missed or given twice");
        // Within a worker, blocks come in ascending runs (chunks) so it can
        // combine them.
        for w in &per_worker {
            let breaks = w.windows(2).filter(|p| p[1] != p[0] + 1).count();
            let chunks_max = nblocks / scan.chunk_size().max(1) + 130;
            prop_assert!(breaks as u64 <= chunks_max);
        }
    }

    #[test]
    fn sync_scan_yields_every_block_once(nblocks in 1u64..5000, skip in 0u64..5000) {
        let reg = SyncScans::new();
        let mut first = reg.scan(9, nblocks);
        for _ in 0..skip.min(nblocks) { first.next_block(); }
        let mut s = reg.scan(9, nblocks);
        let mut seen = vec![false; nblocks as usize];
        let mut n = 0;
        while let Some((b, ())) = s.next_block() {
            prop_assert!(!seen[b as usize]);
            seen[b as usize] = true;
            n += 1;
        }
        prop_assert_eq!(n, nblocks);
        // It started at (or just behind) where the first scan was.
        let at = skip.min(nblocks);
        prop_assert!(s.start() <= at && at - s.start() <= 16 || at == nblocks && s.start() < nblocks);
    }
}

#[test]
fn parallel_chunks_follow_postgres_sizes() {
    assert_eq!(ParallelScan::new(100).chunk_size(), 1);
    assert_eq!(ParallelScan::new(560_000).chunk_size(), 512);
    assert_eq!(ParallelScan::new(1 << 40).chunk_size(), 8192);
}
