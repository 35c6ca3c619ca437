//! The core conformance suite over object_store's in-memory store, with and
//! without request latency.

use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use pagestream::testing::conformance::{run_all, Harness};
use pagestream::testing::stamp;
use pagestream_object_store::{ObjectFile, ObjectStoreEngine};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Objects {
    engine: ObjectStoreEngine,
    store: Arc<dyn ObjectStore>,
    handle: tokio::runtime::Handle,
    next: AtomicU64,
}

impl Objects {
    fn put(&self, bytes: Vec<u8>) -> ObjectFile {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = ObjectPath::from(format!("objects/{n}"));
        let store = Arc::clone(&self.store);
        let engine = self.engine.clone();
        tokio::task::block_in_place(|| {
            self.handle.block_on(async move {
                store
                    .put(&path, PutPayload::from(bytes))
                    .await
                    .expect("put");
                engine
                    .open(store, path.clone(), format!("memory:///{path}"))
                    .await
                    .expect("open")
            })
        })
    }
}

impl Harness for Objects {
    type Engine = ObjectStoreEngine;

    fn engine(&self) -> ObjectStoreEngine {
        self.engine.clone()
    }

    fn stamped_file(&self, nblocks: u64, block_size: usize) -> (ObjectFile, u64) {
        let seed = 0x5eed_0000 + self.next.load(Ordering::Relaxed);
        let mut bytes = vec![0u8; nblocks as usize * block_size];
        for (b, page) in bytes.chunks_mut(block_size).enumerate() {
            stamp::fill(seed, b as u64, page);
        }
        (self.put(bytes), seed)
    }

    fn stamped_file_with_tail(
        &self,
        nblocks: u64,
        block_size: usize,
        tail: usize,
    ) -> (ObjectFile, u64) {
        let seed = 0x7a11_0000 + self.next.load(Ordering::Relaxed);
        let mut bytes = vec![0u8; (nblocks as usize + 1) * block_size];
        for (b, page) in bytes.chunks_mut(block_size).enumerate() {
            stamp::fill(seed, b as u64, page);
        }
        bytes.truncate(nblocks as usize * block_size + tail);
        (self.put(bytes), seed)
    }

    fn name(&self) -> String {
        "object-store in memory".into()
    }

    fn reads_stay_pending(&self) -> bool {
        true
    }

    fn aborts_abandoned_reads(&self) -> bool {
        true
    }
}

fn run(store: Arc<dyn ObjectStore>) -> ObjectStoreEngine {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let engine = rt.block_on(async { ObjectStoreEngine::new().expect("engine") });
    let h = Objects {
        engine: engine.clone(),
        store,
        handle: rt.handle().clone(),
        next: AtomicU64::new(0),
    };
    rt.block_on(run_all(&h));
    engine
}

#[test]
fn conformance_in_memory() {
    let engine = run(Arc::new(InMemory::new()));
    let st = engine.stats();
    assert!(st.gets > 0 && st.bytes > 0, "{st:?}");
}

#[test]
fn conformance_in_memory_with_latency() {
    let cfg = ThrottleConfig {
        wait_get_per_call: Duration::from_millis(2),
        ..ThrottleConfig::default()
    };
    let engine = run(Arc::new(ThrottledStore::new(InMemory::new(), cfg)));
    let st = engine.stats();
    assert!(st.gets > 0 && st.answered > 0, "{st:?}");
}
