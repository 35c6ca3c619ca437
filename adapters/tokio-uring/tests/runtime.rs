//! The runtime `try_start` builds (a submission queue of a few entries) and
//! the file's descriptor and read-ahead switch.

mod common;

use common::{engine_or_skip, stamped};
use futures::StreamExt;
use pagestream::testing::stamp;
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_tokio_uring::{
    runtime_builder, try_start, COMPLETION_QUEUE_ENTRIES, SUBMISSION_QUEUE_ENTRIES,
};
use std::os::fd::{AsFd, AsRawFd};

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

/// The descriptor is the open file's; turning read-ahead off tells the
/// planner, and is a no-op for O_DIRECT files.
#[test]
fn descriptor_and_readahead_off() {
    if engine_or_skip("descriptor_and_readahead_off").is_none() {
        return;
    }
    let n = 8u64;
    let (buffered, _) = stamped(n, BS, false);
    assert_eq!(buffered.as_raw_fd(), buffered.as_fd().as_raw_fd());
    let dup = buffered.as_fd().try_clone_to_owned().expect("dup");
    let len = std::fs::File::from(dup).metadata().expect("fstat").len();
    assert_eq!(len, buffered.byte_len().expect("len"));
    assert!(buffered.kernel_readahead());
    let clone = buffered.clone();
    buffered.disable_readahead().expect("fadvise");
    assert!(!buffered.kernel_readahead());
    assert!(!clone.kernel_readahead(), "clones share the open file");
    let (direct, _) = stamped(n, BS, true);
    assert!(!direct.kernel_readahead());
    direct.disable_readahead().expect("no-op");
    assert!(!direct.kernel_readahead());
}
