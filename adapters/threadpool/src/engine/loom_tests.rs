//! Loom models of the engine's two read queues, driven by a real
//! [`ReadStream`] over a small file: the cached-read queue and its helper
//! thread (`cached.rs`: `queue_cached`, `helper`, `help`) and the I/O
//! threads' queue (`threads.rs`: `submit`, `worker`). Run with
//! `RUSTFLAGS="--cfg pagestream_loom" CARGO_TARGET_DIR=target/loom cargo test -p pagestream-threadpool --release loom`.
//!
//! Under loom the helper's linger for a lone job never ends (`cached.rs`):
//! a lone queued read is done by its stream's help, by the helper once a
//! second read is queued, or by the helper at shutdown. A read stranded
//! in a queue leaves the stream (or, at shutdown, the helper) blocked with
//! nothing to wake it, which loom reports as a deadlock; so is a thread of
//! the engine left asleep when the model ends.
//!
//! The reads are real `preadv2` calls. Those with `RWF_NOWAIT` take the
//! same path in every execution only while the file's pages stay in the
//! page cache, so every execution reads the whole file first, and the
//! models of the cached-read queue assert that no read left the cached
//! path (a page the kernel had dropped would send its read to an I/O
//! thread: the model would fail saying so, not pass on another path).

use super::*;
use futures::StreamExt;
use loom::future::block_on;
use pagestream::testing::{stamp, StampedFile};
use pagestream::{source, BufferPool, ReadStream, YieldBudget};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize as StdAtomicUsize;

const BS: usize = 512;

/// Runs `f` under loom with at most `preemptions` preemptions per
/// execution: the stream's own bookkeeping (the pool's atomics) between the
/// queues' scheduling points makes unbounded exploration take many
/// minutes. Each model uses the most that costs seconds in release (about
/// 3 s, 9 s and 9 s; one more costs each about ten times that).
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

/// An engine whose reads of a warm file go to the cached-read queue: two
/// cached reads in flight per stream (the fewest that start the helper),
/// no AIO, one I/O thread.
fn engine() -> ThreadPoolEngine {
    ThreadPoolEngine::builder()
        .threads(1)
        .aio(false)
        .cached_reads(CachedReads::InFlight(2))
        .build()
}

/// A stamped file of `nblocks` blocks on disk, and its path and seed for
/// the model's closure.
fn stamped(tag: &str, nblocks: u64) -> (StampedFile, PathBuf, u64) {
    let f = StampedFile::new(tag, nblocks, BS);
    let (path, seed) = (f.path().to_owned(), f.seed());
    (f, path, seed)
}

/// Reads the whole file, so that its pages are in the page cache.
fn warm(path: &Path) {
    let bytes = std::fs::read(path).expect("read the file");
    assert!(!bytes.is_empty());
}

/// A stream of blocks `0..nblocks` of the file at `path`: two reads in
/// flight, one block per read, no yield budget (a time budget would make
/// the model's paths depend on the wall clock).
fn stream<E: IoEngine<File = ThreadPoolFile>>(
    pool: &BufferPool,
    engine: E,
    path: &Path,
    nblocks: u64,
) -> ReadStream<E, source::Forward> {
    let file = ThreadPoolFile::open(path).expect("open");
    ReadStream::builder(pool, engine, file)
        .max_ios(2)
        .io_combine_limit(1)
        .yield_budget(YieldBudget::Unlimited)
        .build(source::forward(0..nblocks))
        .expect("stream")
}

/// A pool of 8 frames of `BS` bytes.
fn pool() -> BufferPool {
    BufferPool::builder()
        .frames(8)
        .block_size(BS)
        .build()
        .expect("pool")
}

/// Reads the stream to its end, checking that it hands out blocks
/// `0..n` in order, each with its bytes.
fn read_all<E: IoEngine>(s: &mut ReadStream<E, source::Forward>, seed: u64, n: u64) {
    block_on(async {
        let mut next = 0;
        while let Some(page) = s.next().await {
            let page = page.expect("no read fails");
            assert_eq!(page.block(), next, "pages out of order");
            assert!(stamp::check(seed, next, &page), "block {next}'s bytes");
            next += 1;
        }
        assert_eq!(next, n, "pages missing");
    });
}

/// Asserts that every read stayed on the cached path: none found the page
/// cache short (see the module docs) or went to an I/O thread.
fn assert_all_cached(es: &EngineStats) {
    assert_eq!(
        (es.nowait_partial, es.nowait_would_block, es.queued),
        (0, 0, 0),
        "a read left the cached path (the page cache dropped the file?): {es:?}"
    );
}

/// A stream reading four cached blocks, two reads in flight, while the
/// helper thread takes reads from the queue: block 0 is read inline
/// (making the file warm), the others are queued. Proves that every queued
/// read is done (by the stream's `help` when it is about to wait, or by
/// the helper once two are queued) and wakes the stream, so the stream
/// hands out every page in order with its bytes; that the engine's drop
/// ends the helper (loom fails a model that ends with it asleep); and,
/// over all executions, that both the stream and the helper did queued
/// reads (the model covers both hand-offs).
#[test]
fn loom_queued_reads_are_done_by_the_stream_or_the_helper() {
    const N: u64 = 4;
    let (f, path, seed) = stamped("loom-queue", N);
    let helped = std::sync::Arc::new(StdAtomicUsize::new(0));
    let by_helper = std::sync::Arc::new(StdAtomicUsize::new(0));
    let (h, bh) = (
        std::sync::Arc::clone(&helped),
        std::sync::Arc::clone(&by_helper),
    );
    model(4, move || {
        warm(&path);
        let pool = pool();
        let engine = engine();
        let mut s = stream(&pool, engine.clone(), &path, N);
        read_all(&mut s, seed, N);
        drop(s);
        let es = engine.stats();
        assert_all_cached(&es);
        assert!(es.cached_queued >= 1, "no read was queued: {es:?}");
        h.fetch_add(usize::from(es.helped_reads > 0), Ordering::Relaxed);
        bh.fetch_add(usize::from(es.helper_reads > 0), Ordering::Relaxed);
        drop(engine);
    });
    assert!(
        helped.load(Ordering::Relaxed) > 0,
        "the stream never helped"
    );
    assert!(
        by_helper.load(Ordering::Relaxed) > 0,
        "the helper never took a read"
    );
    drop(f);
}

/// A stream that takes its first page (block 0, read inline; the reads of
/// blocks 1 and 2 are then queued) and is dropped with them still queued
/// or in the helper's hands, and then the engine is dropped. Proves that
/// the helper does every read left in the queue at shutdown, whether one or
/// two are left, and then exits (loom fails a model that ends with it
/// asleep): a second stream over the same blocks, through an engine
/// without a helper, finds every one of them in the pool (or waits for the
/// helper's read of it) and reads none itself. A read dropped unread would
/// leave its frame empty, and the second stream would read it.
#[test]
fn loom_queued_reads_are_done_at_shutdown() {
    const N: u64 = 3;
    let (f, path, seed) = stamped("loom-shutdown", N);
    model(4, move || {
        warm(&path);
        let pool = pool();
        let engine = engine();
        let mut s = stream(&pool, engine.clone(), &path, N);
        block_on(async {
            let page = s.next().await.expect("a page").expect("no read fails");
            assert_eq!(page.block(), 0);
            assert!(stamp::check(seed, 0, &page), "block 0's bytes");
        });
        let started = s.stats().reads;
        drop(s);
        let es = engine.stats();
        assert_all_cached(&es);
        assert!(es.cached_queued >= 1, "no read was queued: {es:?}");
        drop(engine);
        // Every block a read was started for, looked up again.
        let again = ThreadPoolEngine::builder()
            .threads(1)
            .aio(false)
            .cached_reads(CachedReads::One)
            .build();
        let mut s2 = stream(&pool, again.clone(), &path, started);
        read_all(&mut s2, seed, started);
        let st = s2.stats();
        assert_eq!(st.reads, 0, "a queued read was dropped unread: {st}");
    });
    drop(f);
}

/// A stream reading three blocks through an engine that sends every read
/// to its one I/O thread (`RWF_NOWAIT` off), two reads in flight: the
/// second read is queued while the thread is busy with the first, or finds
/// it idle. Proves that `submit` starts the thread or wakes it when idle,
/// and that `worker` looks at the queue before it sleeps, so no queued read
/// is stranded and every page comes back in order with its bytes; and that
/// the engine's drop ends the thread (loom fails a model that ends with it
/// asleep).
#[test]
fn loom_thread_reads_are_never_stranded() {
    const N: u64 = 3;
    let (f, path, seed) = stamped("loom-threads", N);
    model(3, move || {
        warm(&path);
        let pool = pool();
        let engine = ThreadPoolEngine::builder()
            .threads(1)
            .aio(false)
            .nowait(false)
            .build();
        let mut s = stream(&pool, engine.clone(), &path, N);
        read_all(&mut s, seed, N);
        drop(s);
        let es = engine.stats();
        assert_eq!(es.queued, N, "{es:?}");
        assert_eq!(es.threads_started, 1, "{es:?}");
        drop(engine);
    });
    drop(f);
}
