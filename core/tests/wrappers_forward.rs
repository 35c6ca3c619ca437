//! Every test wrapper passes on what it does not change: the wrapped
//! engine's hints, its advice (and whether it was taken) and its help. A
//! wrapper that dropped one would test a path users never run.

use pagestream::testing::{
    Capped, Delayed, Faulty, MemEngine, MemFile, PanicOnFinish, Stall, ThreadTimer,
};
use pagestream::{CachedReads, EngineHints, IoEngine, ReadRequest};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Hints none of them are the default, counts advice and help calls.
#[derive(Clone, Default)]
struct Hinted {
    mem: MemEngine,
    advised: Arc<AtomicU64>,
    helped: Arc<AtomicU64>,
}

const HINTS: EngineHints = EngineHints::new()
    .with_advice(true)
    .with_cached_reads(CachedReads::InFlight(5))
    .with_help(true);

impl IoEngine for Hinted {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        self.mem.start_read(file, req);
    }
    fn hints(&self, _file: &MemFile) -> EngineHints {
        HINTS
    }
    fn advise(&self, _file: &MemFile, offset: u64, len: u64) -> bool {
        self.advised.fetch_add(1, Ordering::Relaxed);
        offset == 8192 && len == 8192
    }
    fn help(&self, _file: &MemFile) -> bool {
        self.helped.fetch_add(1, Ordering::Relaxed) % 2 == 0
    }
    fn name(&self) -> &'static str {
        "hinted"
    }
}

fn check<W: IoEngine<File = MemFile>>(what: &str, inner: &Hinted, wrapper: W) {
    let file = inner.mem.create(vec![0; 4 * 8192]);
    let (a0, h0) = (
        inner.advised.load(Ordering::Relaxed),
        inner.helped.load(Ordering::Relaxed),
    );
    assert_eq!(wrapper.hints(&file), HINTS, "{what}: hints");
    assert!(wrapper.advise(&file, 8192, 8192), "{what}: advice taken");
    assert!(!wrapper.advise(&file, 0, 8192), "{what}: advice refused");
    assert_eq!(
        inner.advised.load(Ordering::Relaxed),
        a0 + 2,
        "{what}: advice reached"
    );
    let helped = [wrapper.help(&file), wrapper.help(&file)];
    assert_eq!(
        helped.iter().filter(|&&h| h).count(),
        1,
        "{what}: help answers"
    );
    assert_eq!(
        inner.helped.load(Ordering::Relaxed),
        h0 + 2,
        "{what}: help reached"
    );
}

#[test]
fn every_wrapper_forwards_hints_advice_and_help() {
    let inner = Hinted::default();
    let timer = Arc::new(ThreadTimer::new());
    check(
        "delayed",
        &inner,
        Delayed::new(inner.clone(), timer, Duration::ZERO),
    );
    check("capped", &inner, Capped::new(inner.clone(), 2));
    check("faulty", &inner, Faulty::new(inner.clone()));
    check(
        "panic-on-finish",
        &inner,
        PanicOnFinish::new(inner.clone(), u64::MAX),
    );
    check("stall", &inner, Stall::new(inner.clone(), []));
}
