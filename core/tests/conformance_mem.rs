//! The conformance suite on the in-memory engine and on every wrapper
//! around it: latency with jitter (reordered completions, real reads in
//! flight), a concurrency cap, and random short reads everywhere.

use futures::executor::block_on;
use pagestream::testing::conformance::{run_all, Harness};
use pagestream::testing::{Capped, Delayed, Faulty, MemEngine, MemFile, ThreadTimer, Timer};
use std::sync::Arc;
use std::time::Duration;

struct Mem(MemEngine);

impl Harness for Mem {
    type Engine = MemEngine;
    fn engine(&self) -> MemEngine {
        self.0.clone()
    }
    fn stamped_file(&self, nblocks: u64, block_size: usize) -> (MemFile, u64) {
        let f = self.0.create_stamped(nblocks, block_size);
        let seed = f.seed();
        (f, seed)
    }
    fn stamped_file_with_tail(
        &self,
        nblocks: u64,
        block_size: usize,
        tail: usize,
    ) -> (MemFile, u64) {
        let f = self.0.create_stamped_with_tail(nblocks, block_size, tail);
        let seed = f.seed();
        (f, seed)
    }
    fn name(&self) -> String {
        "memory".into()
    }
}

struct Wrapped<E, F: Fn(MemEngine) -> E> {
    mem: MemEngine,
    wrap: F,
    name: &'static str,
}

impl<E, F> Harness for Wrapped<E, F>
where
    E: pagestream::IoEngine<File = MemFile> + Clone + Send + 'static,
    F: Fn(MemEngine) -> E,
{
    type Engine = E;
    fn engine(&self) -> E {
        (self.wrap)(self.mem.clone())
    }
    fn stamped_file(&self, nblocks: u64, block_size: usize) -> (MemFile, u64) {
        let f = self.mem.create_stamped(nblocks, block_size);
        let seed = f.seed();
        (f, seed)
    }
    fn stamped_file_with_tail(
        &self,
        nblocks: u64,
        block_size: usize,
        tail: usize,
    ) -> (MemFile, u64) {
        let f = self.mem.create_stamped_with_tail(nblocks, block_size, tail);
        let seed = f.seed();
        (f, seed)
    }
    fn name(&self) -> String {
        self.name.into()
    }
}

#[test]
fn conformance_memory() {
    block_on(run_all(&Mem(MemEngine::new())));
}

#[test]
fn conformance_delayed_with_jitter() {
    let timer: Arc<dyn Timer> = Arc::new(ThreadTimer::new());
    let h = Wrapped {
        mem: MemEngine::new(),
        wrap: move |m| {
            Delayed::new(m, Arc::clone(&timer), Duration::from_micros(20))
                .with_jitter(Duration::from_micros(200), 11)
        },
        name: "delayed+jitter",
    };
    block_on(run_all(&h));
}

#[test]
fn conformance_capped() {
    let h = Wrapped {
        mem: MemEngine::new(),
        wrap: |m| Capped::new(m, 2),
        name: "capped(2)",
    };
    block_on(run_all(&h));
}

#[test]
fn conformance_short_reads_everywhere() {
    let h = Wrapped {
        mem: MemEngine::new(),
        wrap: |m| Faulty::new(m).short_reads(300, 5),
        name: "short reads",
    };
    block_on(run_all(&h));
}

#[test]
fn conformance_delayed_capped_short() {
    let timer: Arc<dyn Timer> = Arc::new(ThreadTimer::new());
    let h = Wrapped {
        mem: MemEngine::new(),
        wrap: move |m| {
            Capped::new(
                Delayed::new(
                    Faulty::new(m).short_reads(200, 9),
                    Arc::clone(&timer),
                    Duration::from_micros(10),
                )
                .with_jitter(Duration::from_micros(100), 4),
                3,
            )
        },
        name: "delayed+capped+short",
    };
    block_on(run_all(&h));
}
