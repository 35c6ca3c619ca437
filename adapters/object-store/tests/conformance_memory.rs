//! The core conformance suite over object_store's in-memory store, with and
//! without request latency, with reads on a current-thread runtime and on
//! a multi-thread one.

mod common;

use common::{conformance, Backend, Flavor};
use object_store::memory::InMemory;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::ObjectStore;
use std::sync::Arc;
use std::time::Duration;

fn memory(store: Arc<dyn ObjectStore>) -> Backend {
    Backend::Store {
        store,
        url: "memory:///".into(),
    }
}

#[test]
fn conformance_in_memory() {
    for flavor in [Flavor::CurrentThread, Flavor::MultiThread] {
        let st = conformance(
            "object-store in memory",
            memory(Arc::new(InMemory::new())),
            flavor,
        );
        assert!(st.gets > 0 && st.bytes > 0 && st.failed == 0, "{st:?}");
    }
}

#[test]
fn conformance_in_memory_with_latency() {
    let cfg = ThrottleConfig {
        wait_get_per_call: Duration::from_millis(2),
        ..ThrottleConfig::default()
    };
    for flavor in [Flavor::CurrentThread, Flavor::MultiThread] {
        let store = Arc::new(ThrottledStore::new(InMemory::new(), cfg));
        let st = conformance("object-store in memory with latency", memory(store), flavor);
        assert!(st.gets > 0 && st.answered > 0 && st.failed == 0, "{st:?}");
    }
}
