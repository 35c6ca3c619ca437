//! Reads no stream wants any more are aborted: a stream dropped or reset
//! with GETs stalled in flight gets them cancelled (the engine counts them,
//! the pool has no read left, no frame is left valid), while a read another
//! stream waits for runs to its end and serves that stream.

mod common;

use common::{drain, pool, put_stamped, runtime, wait_until, watchdog};
use futures::StreamExt;
use object_store::memory::InMemory;
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_object_store::testing::Stalling;
use pagestream_object_store::{Hedging, ObjectFile, ObjectStoreEngine};
use std::sync::Arc;
use std::time::Duration;

const N: u64 = 256;
const SEED: u64 = 0xab047;

/// An engine (no hedging) on `rt` and an object of [`N`] stamped blocks in
/// a store stalling every GET by `stall`.
fn setup(
    rt: &tokio::runtime::Runtime,
    stall: Duration,
) -> (ObjectStoreEngine, ObjectFile, Arc<Stalling<InMemory>>) {
    let store = Arc::new(Stalling::new(InMemory::new(), 1, stall));
    let engine = ObjectStoreEngine::builder()
        .handle(rt.handle().clone())
        .hedging(Hedging::off())
        .build()
        .expect("engine");
    let file = rt.block_on(put_stamped(&engine, &store, SEED, N));
    (engine, file, store)
}

/// Polls `s` until it waits (its reads are stalled), returning how many
/// reads it has started.
async fn start_reads<S: pagestream::BlockSource>(s: &mut ReadStream<ObjectStoreEngine, S>) -> u64 {
    let r = tokio::time::timeout(Duration::from_millis(200), s.next()).await;
    assert!(
        r.is_err(),
        "a page arrived through a store that stalls every GET"
    );
    s.stats().reads
}

/// Waits until the engine has aborted `reads` reads and the pool has no
/// read in flight; then no block of `blocks` may be valid.
async fn assert_aborted(
    engine: &ObjectStoreEngine,
    pool: &BufferPool,
    file: &ObjectFile,
    reads: u64,
    blocks: std::ops::Range<u64>,
    what: &str,
) {
    wait_until(what, || {
        engine.stats().aborted == reads && pool.stats().reading == 0
    })
    .await;
    for b in blocks {
        assert!(!pool.contains(file.id(), b), "{what}: block {b} left valid");
    }
    let st = pool.stats();
    assert_eq!((st.pinned, st.reading), (0, 0), "{what}: {st}");
    assert_eq!(
        engine.stats().aborted,
        reads,
        "{what}: {:?}",
        engine.stats()
    );
}

#[test]
fn dropped_stream_aborts_its_reads() {
    let rt = runtime();
    let (engine, file, store) = setup(&rt, Duration::from_secs(600));
    rt.block_on(watchdog("drop", async {
        let pool = pool(256);
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(4)
            .io_combine_limit(8)
            .build(source::forward(0..N))
            .expect("build");
        let reads = start_reads(&mut s).await;
        assert!(reads > 0 && pool.stats().reading > 0, "no read started");
        wait_until("GETs sent", || store.stalled() == reads).await;
        drop(s);
        assert_aborted(&engine, &pool, &file, reads, 0..N, "drop").await;
    }));
}

#[test]
fn reset_stream_aborts_its_reads() {
    let rt = runtime();
    let (engine, file, store) = setup(&rt, Duration::from_secs(600));
    rt.block_on(watchdog("reset", async {
        let pool = pool(256);
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(4)
            .io_combine_limit(8)
            .build(source::iter((0..N).collect::<Vec<_>>()))
            .expect("build");
        let reads = start_reads(&mut s).await;
        assert!(reads > 0, "no read started");
        wait_until("GETs sent", || store.stalled() == reads).await;
        s.reset(source::iter(Vec::new()));
        assert_aborted(&engine, &pool, &file, reads, 0..N, "reset").await;
        // The stream goes on with its new source (empty: it ends).
        assert!(s.next().await.is_none());
        s.close().await;
    }));
}

/// Stream A starts reads and is dropped while stream B, on the same pool,
/// waits for the same blocks: the reads are still wanted, so they run to
/// their end (2 s of stall) and B gets every page from them.
#[test]
fn read_another_stream_waits_for_is_not_aborted() {
    let rt = runtime();
    let (engine, file, _store) = setup(&rt, Duration::from_secs(2));
    rt.block_on(watchdog("shared", async {
        let pool = pool(256);
        let mut a = ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(2)
            .io_combine_limit(8)
            .full(true)
            .build(source::forward(0..N))
            .expect("build a");
        assert!(start_reads(&mut a).await > 0, "A started no read");
        // B asks for exactly the blocks A's reads cover.
        let n = a.stats().blocks_read;
        let mut b = ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(2)
            .io_combine_limit(8)
            .full(true)
            .build(source::forward(0..n))
            .expect("build b");
        let none = start_reads(&mut b).await;
        assert_eq!(none, 0, "B started reads of blocks A is reading");
        drop(a);
        let all: Vec<u64> = (0..n).collect();
        let got = drain(&mut b, SEED, &all, "B").await;
        assert!(got.errors.is_empty(), "{:?}", got.errors);
        let st = b.close().await;
        assert_eq!(st.blocks_read, 0, "B read blocks itself: {st}");
        assert_eq!(engine.stats().aborted, 0, "{:?}", engine.stats());
        let ps = pool.stats();
        assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
    }));
}
