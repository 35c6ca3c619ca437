//! A pool registered as the ring's fixed buffers (`register_pool`): reads
//! into it are `READ_FIXED`s and read the right pages, buffered and
//! O_DIRECT, backward too; reads into another pool still work and are not
//! fixed; one pool per ring.

mod common;

use common::{runtime_or_skip_with, stamped};
use futures::StreamExt;
use pagestream::testing::stamp;
use pagestream::{source, BlockSource, BufferPool, ReadStream};
use pagestream_uring::{UringEngine, UringFile, UringRuntime};
use std::io;

const BS: usize = 8192;
const N: u64 = 512;

/// Scans `blocks` of `file` through `pool`, checking every page's stamp.
fn scan(
    rt: &UringRuntime,
    engine: UringEngine,
    pool: &BufferPool,
    file: &UringFile,
    seed: u64,
    blocks: impl BlockSource<Data = ()> + Unpin,
    what: &str,
) -> u64 {
    rt.block_on(async {
        let mut s = ReadStream::builder(pool, engine, file.clone())
            .build(blocks)
            .expect("build");
        let mut n = 0;
        while let Some(page) = s.next().await {
            let page = page.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(
                stamp::check(seed, page.block(), &page),
                "{what}: block {} has another block's bytes",
                page.block()
            );
            n += 1;
        }
        n
    })
}

fn registered_reads(direct: bool) {
    let what = if direct { "O_DIRECT" } else { "buffered" };
    // The file is cached: without `nowait(false)` its buffered reads would
    // be copied inline and never reach the ring.
    let b = UringRuntime::builder().nowait(false);
    let Some(rt) = runtime_or_skip_with(&format!("registered_reads {what}"), b) else {
        return;
    };
    let engine = rt.engine();
    // Smaller than the file: frames are reused, and reads land all over
    // the registered memory.
    let pool = BufferPool::new(128, BS).expect("pool");
    engine.register_pool(&pool).expect("register the pool");
    engine
        .register_pool(&pool)
        .expect("the same pool again is a no-op");
    let (file, seed) = stamped(N, BS, direct);
    assert_eq!(
        scan(
            &rt,
            engine.clone(),
            &pool,
            &file,
            seed,
            source::forward(0..N),
            what
        ),
        N
    );
    assert_eq!(
        scan(
            &rt,
            engine.clone(),
            &pool,
            &file,
            seed,
            source::backward(0..N),
            what
        ),
        N
    );
    let st = engine.stats();
    assert!(st.fixed > 0, "{what}: no read was a READ_FIXED: {st:?}");
    assert_eq!(
        st.fixed + st.vectored + st.bounced,
        st.reads,
        "{what}: {st:?}"
    );

    // Another pool: refused as the fixed buffers, read all the same.
    let other = BufferPool::new(64, BS).expect("other pool");
    let e = engine.register_pool(&other).expect_err("a second pool");
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
    assert!(e.to_string().contains("another pool"), "{e}");
    let before = engine.stats();
    assert_eq!(
        scan(
            &rt,
            engine.clone(),
            &other,
            &file,
            seed,
            source::forward(0..N),
            what
        ),
        N
    );
    let after = engine.stats();
    assert!(after.reads > before.reads, "{what}: {after:?}");
    assert_eq!(
        after.fixed, before.fixed,
        "{what}: a read into an unregistered pool was a READ_FIXED"
    );
}

#[test]
fn registered_reads_buffered() {
    registered_reads(false);
}

#[test]
fn registered_reads_direct() {
    registered_reads(true);
}
