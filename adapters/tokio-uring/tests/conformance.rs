//! The core conformance suite over real files, buffered and O_DIRECT, inside
//! a tokio-uring runtime.

mod common;

use common::{engine_or_skip, RealFiles};
use pagestream::testing::conformance::run_all;

#[test]
fn conformance_buffered() {
    let Some(engine) = engine_or_skip("conformance_buffered") else {
        return;
    };
    let h = RealFiles::new(engine.clone(), false, "tokio-uring buffered");
    tokio_uring::start(run_all(&h));
    let st = engine.stats();
    eprintln!("engine: {st:?}");
    assert!(
        st.reads > 0 && st.bytes > 0,
        "no reads went through io_uring: {st:?}"
    );
}

#[test]
fn conformance_direct() {
    let Some(engine) = engine_or_skip("conformance_direct") else {
        return;
    };
    let h = RealFiles::new(engine.clone(), true, "tokio-uring O_DIRECT");
    tokio_uring::start(run_all(&h));
    let st = engine.stats();
    eprintln!("engine: {st:?}");
    // The short_reads scenario leaves remainders at unaligned offsets.
    assert!(st.bounced > 0, "unaligned remainders not bounced: {st:?}");
}
