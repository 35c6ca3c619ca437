//! The core conformance suite over real files, buffered and O_DIRECT, inside
//! a tokio-uring runtime.

mod common;

use common::{engine_or_skip, real_files};
use pagestream::testing::conformance::run_all;

#[test]
fn conformance_buffered() {
    let Some(engine) = engine_or_skip("conformance_buffered") else {
        return;
    };
    let h = real_files(engine.clone(), false, "tokio-uring buffered");
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
    let h = real_files(engine.clone(), true, "tokio-uring O_DIRECT");
    tokio_uring::start(run_all(&h));
    let st = engine.stats();
    eprintln!("engine: {st:?}");
    // The short_reads scenario leaves remainders at unaligned offsets.
    assert!(st.bounced > 0, "unaligned remainders not bounced: {st:?}");
}

#[test]
fn conformance_direct_sqpoll() {
    let Some(engine) = engine_or_skip("conformance_direct_sqpoll") else {
        return;
    };
    // A kernel thread polls the submission queue: SQEs reach the kernel
    // without io_uring_enter, completions still come through the driver.
    let uring = tokio_uring::uring_builder().setup_sqpoll(100).clone();
    let rt = tokio_uring::Runtime::new(tokio_uring::builder().uring_builder(&uring));
    let Some(rt) = pagestream::testing::require("io_uring SQPOLL", rt) else {
        return;
    };
    let h = real_files(engine.clone(), true, "tokio-uring O_DIRECT SQPOLL");
    rt.block_on(run_all(&h));
    assert!(engine.stats().reads > 0);
}
