//! The runtime `try_start` builds (a submission queue of a few entries).

mod common;

use common::{engine_or_skip, stamped};
use futures::StreamExt;
use pagestream::testing::stamp;
use pagestream::{source, BufferPool, ReadStream};
use pagestream_tokio_uring::{
    runtime_builder, try_start, COMPLETION_QUEUE_ENTRIES, SUBMISSION_QUEUE_ENTRIES,
};

const BS: usize = 8192;

// The test below keeps 64 reads in flight: more than the submission queue
// holds, and more than a completion queue of twice its size would.
const _: () = assert!(SUBMISSION_QUEUE_ENTRIES >= 1 && 2 * SUBMISSION_QUEUE_ENTRIES < 64);
const _: () = assert!(COMPLETION_QUEUE_ENTRIES >= 64);

/// Far more reads in flight than the submission queue has entries (every
/// push that finds it full submits it) and than tokio-uring's default
/// completion queue for it would hold: every block arrives, right and in
/// order, each read once.
#[test]
fn small_submission_queue_reads_every_block() {
    let Some(engine) = engine_or_skip("small_submission_queue_reads_every_block") else {
        return;
    };
    for direct in [false, true] {
        let n = 512u64;
        let (file, seed) = stamped(n, BS, direct);
        let pool = BufferPool::new(1024, BS).expect("pool");
        // A scattered order, so no two blocks combine: one read per block.
        let order: Vec<u64> = (0..n).map(|i| (i * 197) % n).collect();
        let before = engine.stats();
        let what = format!("direct={direct}");
        let got = try_start(async {
            let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
                .max_ios(64)
                .io_combine_limit(1)
                .full(true)
                .build(source::iter(order.clone()))
                .expect("build");
            let mut got = Vec::new();
            while let Some(page) = s.next().await {
                let page = page.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(stamp::check(seed, page.block(), &page), "{what}");
                got.push(page.block());
            }
            let st = s.close().await;
            assert!(
                st.max_in_flight > u64::from(SUBMISSION_QUEUE_ENTRIES),
                "{what}: {st}"
            );
            got
        })
        .expect("runtime");
        assert_eq!(got, order, "{what}");
        assert_eq!(engine.stats().reads - before.reads, n, "{what}");
    }
}

/// `runtime_builder` is an ordinary tokio-uring builder.
#[test]
fn runtime_builder_starts() {
    if engine_or_skip("runtime_builder_starts").is_none() {
        return;
    }
    assert_eq!(runtime_builder().start(async { 7 }), 7);
}
