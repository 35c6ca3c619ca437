//! The core conformance suite over real files, buffered and O_DIRECT, on
//! pagestream-uring's own driver: each read submitted as it starts (the
//! default), in batches, and through a submission-polling kernel thread.

mod common;

use common::{real_files, runtime_or_skip, runtime_or_skip_with};
use pagestream::testing::conformance::run_all;
use pagestream_uring::UringRuntime;

/// Buffered files the page cache holds: their reads are copied in
/// `start_read` (`RWF_NOWAIT`); what the suite reads uncached or past the
/// cache (short reads, end of file) goes through the ring.
#[test]
fn conformance_buffered() {
    let Some(rt) = runtime_or_skip("conformance_buffered") else {
        return;
    };
    let h = real_files(rt.engine(), false, "uring buffered");
    rt.block_on(run_all(&h));
    let st = rt.stats();
    eprintln!("engine: {st:?}");
    assert!(
        st.nowait_full > 0 && st.bytes > 0,
        "no cached read was copied inline: {st:?}"
    );
}

/// The same files with the inline attempt off: every read goes through
/// the ring and completes in the runtime.
#[test]
fn conformance_buffered_through_the_ring() {
    let b = UringRuntime::builder().nowait(false);
    let Some(rt) = runtime_or_skip_with("conformance_buffered_through_the_ring", b) else {
        return;
    };
    let h =
        real_files(rt.engine(), false, "uring buffered, no RWF_NOWAIT").reads_stay_pending(true);
    rt.block_on(run_all(&h));
    let st = rt.stats();
    eprintln!("engine: {st:?}");
    assert!(
        st.reads > 0 && st.bytes > 0 && st.submit_calls > 0,
        "no reads went through io_uring: {st:?}"
    );
    assert_eq!(
        st.nowait_full + st.nowait_partial + st.nowait_would_block,
        0,
        "RWF_NOWAIT tried with it off: {st:?}"
    );
}

#[test]
fn conformance_direct() {
    let Some(rt) = runtime_or_skip("conformance_direct") else {
        return;
    };
    let h = real_files(rt.engine(), true, "uring O_DIRECT");
    rt.block_on(run_all(&h));
    let st = rt.stats();
    eprintln!("engine: {st:?}");
    // The short_reads scenario leaves remainders at unaligned offsets.
    assert!(st.bounced > 0, "unaligned remainders not bounced: {st:?}");
}

/// Reads queue up to 8 at a time and go to the kernel together (or when
/// the executor waits): nothing is lost or left unsubmitted.
#[test]
fn conformance_direct_batched() {
    let b = UringRuntime::builder().submit_batch(8).entries(8);
    let Some(rt) = runtime_or_skip_with("conformance_direct_batched", b) else {
        return;
    };
    let h = real_files(rt.engine(), true, "uring O_DIRECT batch 8");
    rt.block_on(run_all(&h));
    let st = rt.stats();
    assert!(st.reads > 0, "{st:?}");
    assert!(
        st.submit_calls < st.reads,
        "a batch of 8 submitted every read on its own: {st:?}"
    );
}

/// A kernel thread polls the submission queue: SQEs reach the kernel
/// without io_uring_enter; completions still come through the driver.
#[test]
fn conformance_direct_sqpoll() {
    let b = UringRuntime::builder().sqpoll(100);
    let Some(rt) = runtime_or_skip_with("conformance_direct_sqpoll", b) else {
        return;
    };
    let h = real_files(rt.engine(), true, "uring O_DIRECT SQPOLL");
    rt.block_on(run_all(&h));
    assert!(rt.stats().reads > 0);
}
