//! Hedging decides with the latencies known while a GET waits, not only
//! those known when it was sent: the first GETs of a scan go out together,
//! before any latency is known, and a straggler among them must be hedged
//! once the others have answered, not after the initial guess. And GETs
//! that are merely slow together (a burst the client or server works
//! through) are not stragglers.

use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{
    CopyOptions, GetOptions, GetRange, GetResult, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use pagestream::testing::stamp;
use pagestream::{source, BufferPool, ReadStream};
use pagestream_object_store::testing::Stalling;
use pagestream_object_store::{Hedging, ObjectStoreEngine};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Holds the first GET of each range starting at one of `starts` for
/// `stall` before it is sent; a second GET of the range (a hedge) goes
/// through at once, as a retry reaching another server would.
#[derive(Debug)]
struct Straggler<T> {
    inner: T,
    starts: Mutex<HashSet<u64>>,
    stall: Duration,
}

impl<T: std::fmt::Display> std::fmt::Display for Straggler<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Straggler({})", self.inner)
    }
}

#[async_trait::async_trait]
impl<T: ObjectStore> ObjectStore for Straggler<T> {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let start = match &options.range {
            Some(GetRange::Bounded(r)) => Some(r.start),
            _ => None,
        };
        let first = start.is_some_and(|s| self.starts.lock().unwrap().remove(&s));
        if first {
            tokio::time::sleep(self.stall).await;
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

const BS: usize = 8192;

/// A stamped object of `n` pages in memory, each GET taking `latency`.
fn table(
    rt: &tokio::runtime::Runtime,
    n: u64,
    seed: u64,
    latency: Duration,
) -> ThrottledStore<InMemory> {
    let mut bytes = vec![0u8; n as usize * BS];
    for (b, page) in bytes.chunks_mut(BS).enumerate() {
        stamp::fill(seed, b as u64, page);
    }
    let mem = InMemory::new();
    rt.block_on(mem.put(&ObjectPath::from("table"), PutPayload::from(bytes)))
        .expect("put");
    ThrottledStore::new(
        mem,
        ThrottleConfig {
            wait_get_per_call: latency,
            ..ThrottleConfig::default()
        },
    )
}

/// Scans the object through `store` with one page per GET, 64 in flight,
/// checking every page; returns the time and the engine's counters.
fn scan(
    rt: &tokio::runtime::Runtime,
    store: Arc<dyn ObjectStore>,
    n: u64,
    seed: u64,
    hedging: Hedging,
) -> (Duration, pagestream_object_store::ObjectStoreStats) {
    let engine = rt
        .block_on(async {
            ObjectStoreEngine::builder()
                .read_bytes(BS)
                .reads_in_flight(64)
                .hedging(hedging)
                .build()
        })
        .expect("engine");
    let file = rt
        .block_on(engine.open(store, ObjectPath::from("table"), "memory:///table"))
        .expect("open");
    let pool = BufferPool::new(1024, BS).expect("pool");
    let mut s = ReadStream::builder(&pool, engine.clone(), file)
        .build(source::forward(0..n))
        .expect("stream");
    let t = Instant::now();
    rt.block_on(async {
        let mut next = 0;
        while let Some(p) = s.next().await {
            let p = p.expect("page");
            assert_eq!(p.block(), next);
            assert!(stamp::check(seed, next, &p), "block {next}");
            next += 1;
        }
        assert_eq!(next, n);
    });
    (t.elapsed(), engine.stats())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn stragglers_in_the_first_burst_are_hedged_once_the_others_answer() {
    let rt = runtime();
    let (n, seed) = (256u64, 0x4ed9_e001);
    // Pages 19, 39 and 59 — all in the first 64 GETs, sent at once — are
    // held 10 s the first time they are asked for.
    let store = Straggler {
        inner: table(&rt, n, seed, Duration::from_millis(5)),
        starts: Mutex::new([19u64, 39, 59].map(|b| b * BS as u64).into()),
        stall: Duration::from_secs(10),
    };
    // Until 32 latencies are known, wait 5 s before hedging.
    let h = Hedging::default().with_initial(Duration::from_secs(5));
    let (took, st) = scan(&rt, Arc::new(store), n, seed, h);
    assert!(st.hedged >= 3 && st.hedge_won >= 3, "{st:?}");
    // Hedged at the 5 s guess (or never) it would take 5 s or 10 s.
    assert!(took < Duration::from_millis(2500), "took {took:?}: {st:?}");
}

/// Stalling (every 20th GET, hedges included) over the whole scan: the
/// scan is not held for the stall, and what it hedges stays near the GETs
/// that stalled.
#[test]
fn one_get_in_twenty_stalled_costs_the_scan_little() {
    let rt = runtime();
    let (n, seed) = (256u64, 0x4ed9_e002);
    let stalling = Arc::new(Stalling::new(
        table(&rt, n, seed, Duration::from_millis(5)),
        20,
        Duration::from_millis(1500),
    ));
    let store = Arc::clone(&stalling) as Arc<dyn ObjectStore>;
    let h = Hedging::default().with_initial(Duration::from_secs(5));
    let (took, st) = scan(&rt, store, n, seed, h);
    let stalled = stalling.stalled();
    assert!(stalled >= 10, "{stalled} stalled");
    // A hedge may itself be a 20th GET and stall; every read waits at most
    // one stall, so the scan takes far less than the stalls in a row.
    assert!(took < Duration::from_millis(5000), "took {took:?}: {st:?}");
    // Hedges go to the stalled GETs, not to the healthy ones around them.
    assert!(st.hedged <= 2 * stalled + 8, "{stalled} stalled: {st:?}");
}
