//! The core conformance suite over real files: buffered and O_DIRECT, under
//! `futures::executor::block_on` and inside a task spawned on tokio's
//! multi-thread runtime (which also proves the streams are `Send`).

mod common;

use common::real_files;
use futures::executor::block_on;
use pagestream::testing::conformance::run_all;
use pagestream_threadpool::ThreadPoolEngine;

#[test]
fn conformance_buffered_block_on() {
    block_on(run_all(&real_files(
        ThreadPoolEngine::new(),
        false,
        "buffered",
    )));
}

#[test]
fn conformance_buffered_no_nowait_block_on() {
    let engine = ThreadPoolEngine::builder().nowait(false).threads(3).build();
    block_on(run_all(&real_files(engine, false, "buffered-no-nowait")));
}

#[test]
fn conformance_direct_block_on() {
    block_on(run_all(&real_files(
        ThreadPoolEngine::new(),
        true,
        "direct",
    )));
}

#[test]
fn conformance_direct_no_aio_block_on() {
    // O_DIRECT reads on the I/O threads only (the fallback of AIO).
    let engine = ThreadPoolEngine::builder().aio(false).build();
    block_on(run_all(&real_files(engine, true, "direct-no-aio")));
}

#[test]
fn conformance_one_thread_block_on() {
    // One I/O thread: reads queue behind each other, caps still hold.
    let engine = ThreadPoolEngine::builder().threads(1).build();
    block_on(run_all(&real_files(engine, true, "direct-1-thread")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_buffered_tokio() {
    let h = real_files(ThreadPoolEngine::new(), false, "buffered-tokio");
    tokio::spawn(async move { run_all(&h).await })
        .await
        .expect("suite task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_direct_tokio() {
    let h = real_files(ThreadPoolEngine::new(), true, "direct-tokio");
    tokio::spawn(async move { run_all(&h).await })
        .await
        .expect("suite task");
}
