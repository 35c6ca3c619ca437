//! Hedged GETs over a store where one GET in 20 stalls for seconds: with
//! hedging on, the stalled GETs are sent again and the copies win; with it
//! off, nothing is hedged. Every page is checked either way.

mod common;

use common::{drain, pool, put_stamped, runtime, watchdog, BS};
use object_store::memory::InMemory;
use pagestream::{source, ReadStream};
use pagestream_object_store::testing::Stalling;
use pagestream_object_store::{Hedging, ObjectStoreEngine, ObjectStoreStats};
use std::sync::Arc;
use std::time::Duration;

const N: u64 = 256;
const SEED: u64 = 0x4ed9e;

/// Scans an object of [`N`] blocks (32 GETs of 8 blocks, 8 in flight)
/// through a store stalling GETs 20, 40, … by 2 s, on an engine hedging as
/// `hedging` says; returns the engine's counters, the GETs stalled and the
/// stream's reads.
fn scan(hedging: Hedging) -> (ObjectStoreStats, u64, u64) {
    let rt = runtime();
    let store = Arc::new(Stalling::new(InMemory::new(), 20, Duration::from_secs(2)));
    let engine = ObjectStoreEngine::builder()
        .handle(rt.handle().clone())
        .hedging(hedging)
        .build()
        .expect("engine");
    let reads = rt.block_on(watchdog("hedged scan", async {
        let file = put_stamped(&engine, &store, SEED, N).await;
        assert_eq!(file.len(), N * BS as u64);
        let pool = pool(512);
        let mut s = ReadStream::builder(&pool, engine.clone(), file)
            .max_ios(8)
            .io_combine_limit(8)
            .build(source::forward(0..N))
            .expect("build");
        let all: Vec<u64> = (0..N).collect();
        let got = drain(&mut s, SEED, &all, "hedging").await;
        assert!(got.errors.is_empty(), "{:?}", got.errors);
        let reads = s.close().await.reads;
        let st = pool.stats();
        assert_eq!((st.pinned, st.reading), (0, 0), "{st}");
        reads
    }));
    (engine.stats(), store.stalled(), reads)
}

#[test]
fn stalled_gets_are_hedged_and_the_hedges_win() {
    // Healthy GETs answer in microseconds: after 8 of them the threshold
    // is the 10 ms floor, far below the 2 s stall.
    let hedging = Hedging::default()
        .with_min_samples(8)
        .with_initial(Duration::from_millis(50));
    let (st, stalled, reads) = scan(hedging);
    assert!(stalled > 0, "no GET was stalled: {st:?}");
    assert!(st.hedged > 0, "no GET was hedged: {st:?}");
    assert_eq!(
        st.gets,
        reads + st.hedged,
        "a GET per read and hedge: {st:?}"
    );
    assert!(st.hedge_won > 0, "no hedge won: {st:?}");
    assert!(st.hedge_won <= st.hedged && st.failed == 0, "{st:?}");
    assert_eq!(st.bytes, N * BS as u64, "bytes written into frames: {st:?}");
}

#[test]
fn without_hedging_nothing_is_hedged() {
    let (st, stalled, reads) = scan(Hedging::off());
    assert!(stalled > 0, "no GET was stalled: {st:?}");
    assert_eq!((st.hedged, st.hedge_won), (0, 0), "{st:?}");
    assert_eq!(st.gets, reads, "one GET per read: {st:?}");
    assert_eq!(st.hedge_threshold_ns, 0, "{st:?}");
}
