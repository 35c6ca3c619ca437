//! The inline `RWF_NOWAIT` attempt on buffered files, on both engines: a
//! read the page cache holds is copied in `start_read` and never reaches
//! the ring; a read it holds the start of is finished by the ring; a read
//! it holds none of goes to the ring whole. Every page is checked against
//! its stamp.

mod common;

use common::{evict, runtime_or_skip, runtime_or_skip_with};
use futures::StreamExt;
use pagestream::testing::{stamp, StampedFile};
use pagestream::{source, BufferPool, IoEngine, ReadStream};
use pagestream_uring::{EngineStats, UringFile, UringRuntime};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

const BS: usize = 8192;
/// Blocks of a read: one request per 16 blocks.
const COMBINE: usize = 16;

/// Reads blocks `0..n` of `file` in reads of [`COMBINE`] blocks, checks
/// every page, and returns how many reads the stream started.
async fn scan<E: IoEngine<File = UringFile>>(
    engine: E,
    file: &UringFile,
    seed: u64,
    n: u64,
) -> u64 {
    let pool = BufferPool::new(256, BS).expect("pool");
    let mut s = ReadStream::builder(&pool, engine, file.clone())
        .io_combine_limit(COMBINE)
        .max_ios(4)
        .build(source::forward(0..n))
        .expect("build");
    let mut pages = 0;
    while let Some(page) = s.next().await {
        let page = page.expect("page");
        assert!(
            stamp::check(seed, page.block(), &page),
            "block {} came back wrong",
            page.block()
        );
        pages += 1;
    }
    assert_eq!(pages, n, "pages handed out");
    s.close().await.reads
}

/// A stamped file of `n` blocks, all of it in the page cache.
fn cached_file(name: &str, n: u64) -> StampedFile {
    let f = StampedFile::new(name, n, BS);
    let mut all = Vec::new();
    std::fs::File::open(f.path())
        .and_then(|mut h| h.read_to_end(&mut all))
        .expect("read the file into the page cache");
    f
}

/// A stamped file of `n` blocks of which the page cache holds only the
/// first `cached` (read with kernel read-ahead off, so it brings in no
/// more).
fn partly_cached_file(name: &str, n: u64, cached: u64) -> StampedFile {
    let f = StampedFile::new(name, n, BS);
    evict(f.path(), n * BS as u64);
    let h = std::fs::File::open(f.path()).expect("open");
    pagestream::os::fadvise(h.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM).expect("fadvise");
    let mut buf = vec![0u8; cached as usize * BS];
    h.read_exact_at(&mut buf, 0)
        .expect("read the cached blocks");
    f
}

fn nowait_tries(st: &EngineStats) -> u64 {
    st.nowait_full + st.nowait_partial + st.nowait_would_block
}

#[test]
fn cached_reads_never_reach_the_ring() {
    let Some(rt) = runtime_or_skip("cached_reads_never_reach_the_ring") else {
        return;
    };
    let f = cached_file("nowait-cached", 256);
    let file = UringFile::open(f.path()).expect("open");
    let reads = rt.block_on(scan(rt.engine(), &file, f.seed(), 256));
    let st = rt.stats();
    assert_eq!(st.nowait_full, reads, "every read copied inline: {st:?}");
    assert_eq!(st.reads, 0, "a cached read went to the ring: {st:?}");
}

/// A cached file that ends in a partial block, read with a short last
/// page: the last read is copied short, ends the request, and counts as
/// served from the page cache like the others (the stream's look-ahead
/// hears that no read waited for the device).
#[test]
fn a_cached_short_last_page_is_a_cached_read() {
    let Some(rt) = runtime_or_skip("a_cached_short_last_page_is_a_cached_read") else {
        return;
    };
    let (n, tail) = (40u64, 1000);
    let f = StampedFile::with_tail("nowait-short", n, BS, tail);
    let mut all = Vec::new();
    std::fs::File::open(f.path())
        .and_then(|mut h| h.read_to_end(&mut all))
        .expect("read the file into the page cache");
    let file = UringFile::open(f.path()).expect("open");
    let pool = BufferPool::new(256, BS).expect("pool");
    let st = rt.block_on(async {
        let mut s = ReadStream::builder(&pool, rt.engine(), file.clone())
            .io_combine_limit(COMBINE)
            .short_last_page(true)
            .build(source::forward(0..n + 1))
            .expect("build");
        let mut last = 0;
        while let Some(page) = s.next().await {
            let page = page.expect("page");
            let want = stamp::page(f.seed(), page.block(), BS);
            let len = if page.block() == n { tail } else { BS };
            assert_eq!(page.len(), len, "block {}", page.block());
            assert!(
                page[..] == want[..len],
                "block {} came back wrong",
                page.block()
            );
            last = page.block();
        }
        assert_eq!(last, n, "the short last page was not handed out");
        s.close().await
    });
    let es = rt.stats();
    assert_eq!(es.reads, 0, "a cached read went to the ring: {es:?}");
    assert_eq!(es.nowait_full, st.reads, "{es:?}");
    assert_eq!(
        st.cached_reads, st.reads,
        "a cached read counted as one that waited: {st}"
    );
}

#[test]
fn a_partly_cached_read_is_finished_by_the_ring() {
    let Some(rt) = runtime_or_skip("a_partly_cached_read_is_finished_by_the_ring") else {
        return;
    };
    // The first read covers blocks 0..16, of which 0..4 are cached.
    let f = partly_cached_file("nowait-partial", 64, 4);
    let file = UringFile::open(f.path()).expect("open");
    rt.block_on(scan(rt.engine(), &file, f.seed(), 64));
    let st = rt.stats();
    assert!(st.nowait_partial >= 1, "no partly cached read: {st:?}");
    assert!(
        st.reads >= 1,
        "the remainder did not go to the ring: {st:?}"
    );
}

#[test]
fn uncached_reads_go_to_the_ring() {
    let Some(rt) = runtime_or_skip("uncached_reads_go_to_the_ring") else {
        return;
    };
    let f = partly_cached_file("nowait-uncached", 64, 0);
    let file = UringFile::open(f.path()).expect("open");
    rt.block_on(scan(rt.engine(), &file, f.seed(), 64));
    let st = rt.stats();
    assert!(
        st.nowait_would_block >= 1,
        "no read found nothing cached: {st:?}"
    );
    assert!(st.reads >= 1, "{st:?}");
}

#[test]
fn off_every_read_goes_to_the_ring() {
    let b = UringRuntime::builder().nowait(false);
    let Some(rt) = runtime_or_skip_with("off_every_read_goes_to_the_ring", b) else {
        return;
    };
    let f = cached_file("nowait-off", 64);
    let file = UringFile::open(f.path()).expect("open");
    let reads = rt.block_on(scan(rt.engine(), &file, f.seed(), 64));
    let st = rt.stats();
    assert_eq!(nowait_tries(&st), 0, "{st:?}");
    assert_eq!(st.reads, reads, "{st:?}");
}

/// O_DIRECT reads never try `RWF_NOWAIT`: they do not go through the
/// page cache.
#[test]
fn direct_reads_always_go_to_the_ring() {
    let Some(rt) = runtime_or_skip("direct_reads_always_go_to_the_ring") else {
        return;
    };
    let f = cached_file("nowait-direct", 64);
    let file = UringFile::open_direct(f.path(), BS).expect("open O_DIRECT");
    let reads = rt.block_on(scan(rt.engine(), &file, f.seed(), 64));
    let st = rt.stats();
    assert_eq!(nowait_tries(&st), 0, "{st:?}");
    assert_eq!(st.reads, reads, "{st:?}");
}

/// On tokio's multi-thread runtime, a warm scan spawned on a worker: its
/// reads are copied in the stream's own poll, none reaches the ring, so
/// none can wake the reaper on another worker.
#[cfg(feature = "tokio")]
#[test]
fn on_tokio_cached_reads_never_reach_the_ring() {
    use common::on_tokio::{engine_or_skip, runtime};
    let rt = runtime(true);
    let Some(engine) = engine_or_skip("on_tokio_cached_reads_never_reach_the_ring", &rt) else {
        return;
    };
    let f = cached_file("nowait-tokio", 256);
    let file = UringFile::open(f.path()).expect("open");
    let seed = f.seed();
    let e = engine.clone();
    let reads = rt.block_on(async move {
        tokio::spawn(async move { scan(e, &file, seed, 256).await })
            .await
            .expect("scan task")
    });
    let st = engine.stats();
    assert_eq!(st.nowait_full, reads, "every read copied inline: {st:?}");
    assert_eq!(st.reads, 0, "a cached read went to the ring: {st:?}");
}

/// The same engine on a partly cached file: the remainders go to the ring
/// and are reaped on tokio.
#[cfg(feature = "tokio")]
#[test]
fn on_tokio_a_partly_cached_read_is_finished_by_the_ring() {
    use common::on_tokio::{engine_or_skip, runtime};
    let rt = runtime(true);
    let Some(engine) = engine_or_skip("on_tokio_a_partly_cached_read_is_finished_by_the_ring", &rt)
    else {
        return;
    };
    let f = partly_cached_file("nowait-tokio-partial", 64, 4);
    let file = UringFile::open(f.path()).expect("open");
    let seed = f.seed();
    let e = engine.clone();
    rt.block_on(async move {
        tokio::spawn(async move { scan(e, &file, seed, 64).await })
            .await
            .expect("scan task")
    });
    let st = engine.stats();
    assert!(st.nowait_partial >= 1, "no partly cached read: {st:?}");
    assert!(
        st.reads >= 1,
        "the remainder did not go to the ring: {st:?}"
    );
    assert_eq!(engine.in_flight(), 0, "{st:?}");
}
