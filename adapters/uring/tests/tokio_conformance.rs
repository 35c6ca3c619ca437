//! The core conformance suite on [`UringTokioEngine`], over real files
//! buffered and O_DIRECT, under both tokio runtime flavours: the suite runs
//! inside the runtime's `block_on` (as in `#[tokio::main]`) and in a task
//! spawned on it; on rings set up with SQPOLL and with COOP_TASKRUN; and
//! buffered with the inline `RWF_NOWAIT` attempt off, every read through the
//! ring.

#![cfg(feature = "tokio")]

mod common;

use common::on_tokio::{flavour, harness, runtime};
use pagestream::testing::conformance::run_all;
use pagestream::testing::require_named;
use pagestream_uring::{EngineStats, UringTokioBuilder, UringTokioEngine};

fn conformance(test: &str, multi: bool, direct: bool, spawned: bool) {
    conformance_with(test, multi, direct, spawned, UringTokioEngine::builder);
}

/// Buffered, the inline attempt off: the suite's reads all go to the ring.
fn through_the_ring(test: &str, multi: bool, spawned: bool) {
    let Some(st) = conformance_with(test, multi, false, spawned, || {
        UringTokioEngine::builder().nowait(false)
    }) else {
        return;
    };
    assert!(st.reads > 0, "no reads went through io_uring: {st:?}");
    assert_eq!(
        st.nowait_full + st.nowait_partial + st.nowait_would_block,
        0,
        "RWF_NOWAIT tried with it off: {st:?}"
    );
}

fn conformance_with(
    test: &str,
    multi: bool,
    direct: bool,
    spawned: bool,
    builder: impl FnOnce() -> UringTokioBuilder,
) -> Option<EngineStats> {
    let rt = runtime(multi);
    let engine = require_named(test, "io_uring", rt.block_on(async { builder().build() }))?;
    let name = format!(
        "uring-tokio {} {}{}",
        flavour(multi),
        if direct { "O_DIRECT" } else { "buffered" },
        if spawned { " spawned" } else { "" }
    );
    let h = harness(engine.clone(), direct, &name);
    if spawned {
        rt.block_on(async move {
            tokio::spawn(async move { run_all(&h).await })
                .await
                .expect("conformance task")
        });
    } else {
        rt.block_on(run_all(&h));
    }
    let st = engine.stats();
    eprintln!("engine: {st:?}");
    // Buffered files the page cache holds are copied in `start_read`
    // (`RWF_NOWAIT`), the rest read through the ring.
    assert!(
        st.reads + st.nowait_full > 0 && st.bytes > 0,
        "no reads went through the engine: {st:?}"
    );
    if direct {
        assert!(st.bounced > 0, "unaligned remainders not bounced: {st:?}");
    }
    drop(rt);
    assert_eq!(
        engine.in_flight(),
        0,
        "reads left in flight after the suite"
    );
    Some(st)
}

#[test]
fn multi_thread_buffered() {
    conformance("multi_thread_buffered", true, false, false);
}

#[test]
fn multi_thread_direct() {
    conformance("multi_thread_direct", true, true, false);
}

#[test]
fn multi_thread_direct_spawned() {
    conformance("multi_thread_direct_spawned", true, true, true);
}

#[test]
fn multi_thread_buffered_through_the_ring() {
    through_the_ring("multi_thread_buffered_through_the_ring", true, true);
}

#[test]
fn current_thread_buffered_through_the_ring() {
    through_the_ring("current_thread_buffered_through_the_ring", false, false);
}

#[test]
fn current_thread_buffered() {
    conformance("current_thread_buffered", false, false, false);
}

#[test]
fn current_thread_direct() {
    conformance("current_thread_direct", false, true, false);
}

#[test]
fn multi_thread_direct_sqpoll() {
    conformance_with("multi_thread_direct_sqpoll", true, true, true, || {
        UringTokioEngine::builder().sqpoll(10)
    });
}

#[test]
fn current_thread_buffered_sqpoll() {
    conformance_with(
        "current_thread_buffered_sqpoll",
        false,
        false,
        false,
        || UringTokioEngine::builder().sqpoll(10),
    );
}

#[test]
fn multi_thread_direct_coop_taskrun() {
    conformance_with("multi_thread_direct_coop_taskrun", true, true, true, || {
        UringTokioEngine::builder().coop_taskrun(true)
    });
}

#[test]
fn current_thread_direct_coop_taskrun() {
    conformance_with(
        "current_thread_direct_coop_taskrun",
        false,
        true,
        false,
        || UringTokioEngine::builder().coop_taskrun(true),
    );
}
