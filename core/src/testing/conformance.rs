//! The conformance suite: scenarios every engine's tests run
//! (object_store's `integration` style).
//!
//! An engine's test implements [`Harness`] (how to make the engine and a
//! stamped file) and calls [`run_all`] under its runtime, e.g.
//! `futures::executor::block_on(run_all(&h))`, inside `tokio_uring::start`,
//! or on a glommio executor. Each scenario builds its own pool, verifies
//! every page byte for byte against its [`stamp`], checks the
//! stats that must hold on any engine, and checks that no pin is left
//! behind. A failing scenario panics with the scenario's name and what
//! differed.
//!
//! Scenarios that need fault injection wrap the harness's engine in
//! [`Faulty`] or [`Stall`], so they run over the real engine's I/O path.

use super::{stamp, Faulty, SplitMix, Stall};
use crate::engine::{EngineFile, IoEngine};
use crate::source::{self, BlockSource};
use crate::{BlockNumber, BufferPool, ReadError, ReadStream, RingSize, StreamBuilder, StreamStats};
use futures::StreamExt;
use std::fmt::Debug;
use std::io;

/// How to make an engine and stamped files for the suite.
pub trait Harness {
    /// The engine under test.
    type Engine: IoEngine<File: Clone + 'static> + Clone + 'static;

    /// A fresh engine handle (may share state with earlier ones).
    fn engine(&self) -> Self::Engine;

    /// A file of `nblocks` blocks of `block_size` bytes, block `b` holding
    /// `stamp::fill(seed, b, …)`. Returns the file and its seed.
    fn stamped_file(
        &self,
        nblocks: u64,
        block_size: usize,
    ) -> (<Self::Engine as IoEngine>::File, u64);

    /// A file of `nblocks` stamped blocks as [`stamped_file`](Self::stamped_file)
    /// makes, followed by `tail` bytes (`0 < tail < block_size`): the first
    /// `tail` bytes of block `nblocks`'s stamp. Returns the file and its
    /// seed.
    fn stamped_file_with_tail(
        &self,
        nblocks: u64,
        block_size: usize,
        tail: usize,
    ) -> (<Self::Engine as IoEngine>::File, u64);

    /// Whether the engine reads with O_DIRECT-like alignment needs (only
    /// used to word messages).
    fn name(&self) -> String;

    /// Whether a read the engine starts is never finished before the
    /// stream's poll that started it returns (the io_uring and glommio
    /// engines complete reads in their runtime, after the poll). Scenarios
    /// then also check that reads *are* in flight where they expect them.
    /// Default false: engines may complete reads inline (the thread pool's
    /// `RWF_NOWAIT`, the in-memory engine).
    fn reads_stay_pending(&self) -> bool {
        false
    }

    /// Whether the engine cancels a read once no stream wants it (see
    /// [`ReadRequest::abandoned`](crate::ReadRequest::abandoned)), as the
    /// object-store engine does: a dropped stream's reads then need not
    /// reach a stream built after it. Default false.
    fn aborts_abandoned_reads(&self) -> bool {
        false
    }
}

/// Block size every scenario uses unless it says otherwise.
pub const BS: usize = 8192;

type FileOf<H> = <<H as Harness>::Engine as IoEngine>::File;

/// Runs every scenario, in order, printing each name.
pub async fn run_all<H: Harness>(h: &H) {
    macro_rules! run {
        ($($s:ident),* $(,)?) => {$(
            eprintln!("conformance[{}]: {}", h.name(), stringify!($s));
            $s(h).await;
        )*};
    }
    run!(
        forward,
        backward,
        random,
        sparse,
        repeated,
        zigzag,
        backward_partly_cached,
        hot_rescan,
        shared_pool,
        many_streams_small_pool,
        drop_with_reads_in_flight,
        abandoned_stream,
        reset,
        past_end_of_file,
        partial_last_block,
        pool_exhausted,
        eio_in_the_middle,
        eio_in_backward_run,
        short_reads,
        stalled_read_cancelled,
        limits_hold,
        ring,
        bad_configuration,
        user_data_travels,
    );
}

/// A stream with the stream's own defaults (16 reads of 16 blocks), not
/// the engine's read size ([`EngineHints::read_bytes`](crate::EngineHints)):
/// the scenarios count reads and blocks, and must count the same on every
/// engine.
fn builder<H: Harness, S: BlockSource>(
    pool: &BufferPool,
    h: &H,
    file: FileOf<H>,
) -> StreamBuilder<H::Engine, S> {
    ReadStream::builder(pool, h.engine(), file)
        .max_ios(16)
        .io_combine_limit(16)
}

/// Drains `stream`, checking each page is `expect[i]` with the stamp of
/// `seed`, and returns the number of pages. Panics, naming `what`, on an
/// error, a wrong block or wrong bytes, a page too many or an early end.
pub async fn drain_verify<E, S>(
    stream: &mut ReadStream<E, S>,
    seed: u64,
    expect: &[BlockNumber],
    what: &str,
) -> usize
where
    E: IoEngine,
    S: BlockSource,
{
    let mut i = 0;
    while let Some(item) = stream.next().await {
        let page = item.unwrap_or_else(|e| panic!("{what}: item {i}: unexpected error {e}"));
        assert!(i < expect.len(), "{what}: more pages than asked for");
        assert_eq!(
            page.block(),
            expect[i],
            "{what}: item {i} is the wrong block"
        );
        assert!(
            stamp::check(seed, expect[i], &page),
            "{what}: block {} has wrong contents (stamp of block {:?})",
            expect[i],
            stamp::block_of(&page)
        );
        i += 1;
    }
    assert_eq!(i, expect.len(), "{what}: stream ended early");
    i
}

fn assert_no_pins(pool: &BufferPool, what: &str) {
    let st = pool.stats();
    assert_eq!(st.pinned, 0, "{what}: pins left behind: {st}");
    assert_eq!(st.reading, 0, "{what}: reads left in flight: {st}");
}

/// Drains `stream` with [`drain_verify`], closes it and returns its stats.
async fn verified<E, S>(
    mut stream: ReadStream<E, S>,
    seed: u64,
    expect: &[BlockNumber],
    what: &str,
) -> StreamStats
where
    E: IoEngine,
    S: BlockSource,
{
    drain_verify(&mut stream, seed, expect, what).await;
    stream.close().await
}

/// A fresh forward scan of `0..n` on `pool` must see every page right and
/// leave no pin: the pool is usable after whatever came before.
async fn full_scan_afterwards<H: Harness>(
    h: &H,
    pool: &BufferPool,
    file: FileOf<H>,
    seed: u64,
    n: u64,
    what: &str,
) {
    let expect: Vec<_> = (0..n).collect();
    let s = builder(pool, h, file)
        .build(source::forward(0..n))
        .expect("build");
    verified(s, seed, &expect, what).await;
    assert_no_pins(pool, what);
}

async fn scan<H, S>(
    h: &H,
    pool: &BufferPool,
    file: FileOf<H>,
    seed: u64,
    src: S,
    expect: &[BlockNumber],
    what: &str,
) where
    H: Harness,
    S: BlockSource,
{
    let st = verified(
        builder(pool, h, file)
            .max_ios(4)
            .io_combine_limit(8)
            .build(src)
            .expect("build"),
        seed,
        expect,
        what,
    )
    .await;
    assert_eq!(st.pages, expect.len() as u64, "{what}: stats.pages");
    assert!(st.max_in_flight <= 4, "{what}: max_ios exceeded: {st}");
    assert!(
        st.max_blocks_per_read <= 8,
        "{what}: combine limit exceeded: {st}"
    );
}

/// Every block, ascending, on a cold pool: verified, read once each, combined.
pub async fn forward<H: Harness>(h: &H) {
    let n = 300;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(512, BS).expect("pool");
    let mut s = builder(&pool, h, file)
        .max_ios(4)
        .io_combine_limit(8)
        .build(source::forward(0..n))
        .expect("build");
    let expect: Vec<_> = (0..n).collect();
    drain_verify(&mut s, seed, &expect, "forward").await;
    let st = s.close().await;
    assert_eq!(
        st.blocks_read, n,
        "forward: each block read exactly once: {st}"
    );
    assert!(
        st.mean_blocks_per_read() > 4.0,
        "forward: reads not combined: {st}"
    );
    assert!(
        st.max_in_flight <= 4 && st.max_blocks_per_read <= 8,
        "forward: caps: {st}"
    );
    assert_no_pins(&pool, "forward");
}

/// Every block, descending: descending runs are combined into reads.
pub async fn backward<H: Harness>(h: &H) {
    let n = 300;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(512, BS).expect("pool");
    let mut s = builder(&pool, h, file)
        .max_ios(4)
        .io_combine_limit(8)
        .build(source::backward(0..n))
        .expect("build");
    let expect: Vec<_> = (0..n).rev().collect();
    drain_verify(&mut s, seed, &expect, "backward").await;
    let st = s.close().await;
    assert_eq!(st.blocks_read, n, "backward: {st}");
    assert!(
        st.backward_reads > 0 && st.mean_blocks_per_read() > 4.0,
        "backward: not combined: {st}"
    );
    assert_no_pins(&pool, "backward");
}

/// Every block once in a seeded random order.
pub async fn random<H: Harness>(h: &H) {
    let n = 400;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(128, BS).expect("pool");
    let mut order: Vec<_> = (0..n).collect();
    SplitMix::new(42).shuffle(&mut order);
    scan(
        h,
        &pool,
        file,
        seed,
        source::iter(order.clone()),
        &order,
        "random",
    )
    .await;
    assert_no_pins(&pool, "random");
}

/// A sparse ascending subset with gaps of varying size.
pub async fn sparse<H: Harness>(h: &H) {
    let n = 1000;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(64, BS).expect("pool");
    let mut rng = SplitMix::new(9);
    let blocks: Vec<_> = (0..n).filter(|_| rng.below(10) < 3).collect();
    scan(
        h,
        &pool,
        file,
        seed,
        source::iter(blocks.clone()),
        &blocks,
        "sparse",
    )
    .await;
    assert_no_pins(&pool, "sparse");
}

/// Repeated blocks, adjacent and not: each occurrence is handed out, and a
/// block is read once while it stays in the pool.
pub async fn repeated<H: Harness>(h: &H) {
    let n = 64;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(256, BS).expect("pool");
    let blocks: Vec<u64> = vec![3, 3, 3, 4, 4, 5, 3, 2, 1, 1, 0, 7, 6, 7, 6, 63, 63, 62, 63];
    let st = verified(
        builder(&pool, h, file)
            .max_ios(4)
            .io_combine_limit(8)
            .build(source::iter(blocks.clone()))
            .expect("build"),
        seed,
        &blocks,
        "repeated",
    )
    .await;
    let distinct: std::collections::HashSet<_> = blocks.iter().collect();
    assert_eq!(
        st.blocks_read,
        distinct.len() as u64,
        "repeated: a block read twice: {st}"
    );
    assert_no_pins(&pool, "repeated");
}

/// Direction switches: `10,11,12, 9,8,7, 20` is three reads, `7..=9` backward.
pub async fn zigzag<H: Harness>(h: &H) {
    let (file, seed) = h.stamped_file(32, BS);
    let pool = BufferPool::new(64, BS).expect("pool");
    let blocks = vec![10, 11, 12, 9, 8, 7, 20];
    let st = verified(
        builder(&pool, h, file)
            .full(true)
            .build(source::iter(blocks.clone()))
            .expect("build"),
        seed,
        &blocks,
        "zigzag",
    )
    .await;
    assert_eq!(
        (st.reads, st.backward_reads, st.blocks_read),
        (3, 1, 7),
        "zigzag: {st}"
    );
    assert_no_pins(&pool, "zigzag");
}

/// A backward scan over a range whose middle is already in the pool: the
/// cached blocks split the descending run exactly where they sit.
pub async fn backward_partly_cached<H: Harness>(h: &H) {
    let n = 64;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(128, BS).expect("pool");
    let warm: Vec<u64> = (20..24).collect();
    verified(
        builder(&pool, h, file.clone())
            .build(source::iter(warm.clone()))
            .expect("build"),
        seed,
        &warm,
        "backward_partly_cached warm-up",
    )
    .await;
    let expect: Vec<_> = (0..n).rev().collect();
    let st = verified(
        builder(&pool, h, file)
            .full(true)
            .build(source::backward(0..n))
            .expect("build"),
        seed,
        &expect,
        "backward_partly_cached",
    )
    .await;
    assert_eq!(
        st.hits, 4,
        "backward_partly_cached: cached blocks must be hits: {st}"
    );
    assert_eq!(st.blocks_read, n - 4, "backward_partly_cached: {st}");
    assert_no_pins(&pool, "backward_partly_cached");
}

/// A second scan of a file the pool holds reads nothing and uses the fast
/// path.
pub async fn hot_rescan<H: Harness>(h: &H) {
    let n = 200;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(256, BS).expect("pool");
    let expect: Vec<_> = (0..n).collect();
    for pass in 0..2 {
        let st = verified(
            builder(&pool, h, file.clone())
                .build(source::forward(0..n))
                .expect("build"),
            seed,
            &expect,
            "hot_rescan",
        )
        .await;
        if pass == 1 {
            assert_eq!(st.blocks_read, 0, "hot_rescan: hot scan read: {st}");
            assert_eq!(st.hits, n, "hot_rescan: {st}");
            assert!(
                st.fast_path_pages >= n - 2,
                "hot_rescan: fast path unused: {st}"
            );
        }
    }
    assert_no_pins(&pool, "hot_rescan");
}

/// Two streams scanning one file at once on one pool: every page right, and
/// together they read each block at most once.
pub async fn shared_pool<H: Harness>(h: &H) {
    let n = 256;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(512, BS).expect("pool");
    let fwd: Vec<_> = (0..n).collect();
    let bwd: Vec<_> = (0..n).rev().collect();
    let mut a = builder(&pool, h, file.clone())
        .build(source::forward(0..n))
        .expect("build");
    let mut b = builder(&pool, h, file)
        .build(source::backward(0..n))
        .expect("build");
    futures::join!(
        drain_verify(&mut a, seed, &fwd, "shared_pool a"),
        drain_verify(&mut b, seed, &bwd, "shared_pool b")
    );
    let (sa, sb) = futures::join!(a.close(), b.close());
    assert!(
        sa.blocks_read + sb.blocks_read <= n,
        "shared_pool: a block read twice: {sa}\n{sb}"
    );
    assert_no_pins(&pool, "shared_pool");
}

/// Eight streams on a pool of 64 frames, each asking for 16 × 16 blocks of
/// look-ahead: all finish, none starves, none errs.
pub async fn many_streams_small_pool<H: Harness>(h: &H) {
    let n = 120;
    let pool = BufferPool::new(64, BS).expect("pool");
    let mut streams = Vec::new();
    let mut seeds = Vec::new();
    for _ in 0..8 {
        let (file, seed) = h.stamped_file(n, BS);
        seeds.push(seed);
        streams.push(
            builder(&pool, h, file)
                .max_ios(16)
                .io_combine_limit(16)
                .build(source::forward(0..n))
                .expect("build"),
        );
    }
    let expect: Vec<_> = (0..n).collect();
    let futs = streams
        .iter_mut()
        .zip(&seeds)
        .map(|(s, &seed)| drain_verify(s, seed, &expect, "many_streams_small_pool"));
    futures::future::join_all(futs).await;
    for s in streams {
        let st = s.close().await;
        assert!(st.max_in_flight >= 1, "many_streams_small_pool: {st}");
    }
    assert_no_pins(&pool, "many_streams_small_pool");
}

/// A stream dropped with reads in flight releases its pins; the pool is
/// then reused and every page is right.
pub async fn drop_with_reads_in_flight<H: Harness>(h: &H) {
    let n = 300;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(128, BS).expect("pool");
    {
        let mut s = builder(&pool, h, file.clone())
            .max_ios(8)
            .build(source::forward(0..n))
            .expect("build");
        for i in 0..40 {
            let p = s.next().await.expect("page").expect("ok");
            assert_eq!(p.block(), i);
        }
        drop(s);
    }
    full_scan_afterwards(h, &pool, file, seed, n, "drop_with_reads_in_flight").await;
}

/// Stream A starts reads and is then dropped, or kept and never polled
/// again; stream B over the same blocks on the same pool waits for A's
/// reads instead of issuing its own (reads complete on their own, without
/// their stream), and gets every page right.
pub async fn abandoned_stream<H: Harness>(h: &H) {
    for drop_a in [true, false] {
        let n = 256;
        let what = format!("abandoned_stream (drop_a={drop_a})");
        let (file, seed) = h.stamped_file(n, BS);
        let pool = BufferPool::new(512, BS).expect("pool");
        let mut a = builder(&pool, h, file.clone())
            .max_ios(8)
            .io_combine_limit(16)
            .full(true)
            .build(source::forward(0..n))
            .expect("build a");
        // One poll: A looks ahead and starts reads (an inline engine may
        // already hand out its first page, which is dropped at once).
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(a.poll_next_unpin(cx))).await;
        let pending = first.is_pending();
        drop(first);
        let in_flight = pool.stats().reading as u64;
        if h.reads_stay_pending() {
            assert!(
                pending,
                "{what}: A got a page before its reads could finish"
            );
            assert!(in_flight > 0, "{what}: A started no reads");
        }
        let kept = if drop_a {
            drop(a);
            None
        } else {
            Some(a)
        };
        let mut b = builder(&pool, h, file)
            .max_ios(4)
            .io_combine_limit(8)
            .build(source::forward(0..n))
            .expect("build b");
        let expect: Vec<u64> = (0..n).collect();
        drain_verify(&mut b, seed, &expect, &what).await;
        let st = b.close().await;
        // A's reads delivered their blocks to B (unless A was dropped and
        // the engine cancels reads no stream wants: B then read them again).
        assert!(
            (drop_a && h.aborts_abandoned_reads()) || st.blocks_read <= n - in_flight,
            "{what}: B re-read blocks A was reading ({in_flight} in flight): {st}"
        );
        drop(kept);
        assert_no_pins(&pool, &what);
        let ps = pool.stats();
        assert_eq!(ps.reading, 0, "{what}: {ps}");
    }
}

/// `reset` drops look-ahead and continues from a new source.
pub async fn reset<H: Harness>(h: &H) {
    let n = 200;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(128, BS).expect("pool");
    let first: Vec<u64> = (0..n).collect();
    let mut s = builder(&pool, h, file)
        .build(source::iter(first))
        .expect("build");
    for i in 0..50 {
        assert_eq!(s.next().await.expect("page").expect("ok").block(), i);
    }
    let second: Vec<u64> = (0..n).rev().step_by(3).collect();
    s.reset(source::iter(second.clone()));
    drain_verify(&mut s, seed, &second, "reset").await;
    s.close().await;
    assert_no_pins(&pool, "reset");
}

fn expect_err(item: Option<io::Result<impl Debug>>, what: &str) -> io::Error {
    match item {
        Some(Err(e)) => e,
        other => panic!("{what}: expected an error, got {other:?}"),
    }
}

/// Blocks past the end of the file are errors in their place, naming the
/// block and the file's length; the stream goes on.
pub async fn past_end_of_file<H: Harness>(h: &H) {
    let n = 10;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(32, BS).expect("pool");
    let mut s = builder(&pool, h, file)
        .full(true)
        .build(source::iter(vec![8, 9, 10, 11, 2, 13]))
        .expect("build");
    for want in [8u64, 9] {
        let p = s.next().await.expect("page").expect("ok");
        assert!(p.block() == want && stamp::check(seed, want, &p));
    }
    for bad in [10u64, 11] {
        let e = expect_err(s.next().await, "past_end_of_file");
        match ReadError::from_io(&e) {
            Some(ReadError::PastEnd {
                block, file_len, ..
            }) => {
                assert_eq!(
                    (*block, *file_len),
                    (bad, n * BS as u64),
                    "past_end_of_file: {e}"
                );
            }
            other => panic!("past_end_of_file: wrong error {other:?}"),
        }
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
    let p = s.next().await.expect("page").expect("ok");
    assert_eq!(p.block(), 2);
    drop(p);
    let e = expect_err(s.next().await, "past_end_of_file 13");
    assert!(
        e.to_string().contains("block 13"),
        "error must name the block: {e}"
    );
    assert!(s.next().await.is_none());
    s.close().await;
    assert_no_pins(&pool, "past_end_of_file");
}

/// A file whose length is not a multiple of the block size: by default the
/// stream is not built, with an error naming the file's length, the block
/// size and the tail; asked for, the tail is a short last page, read in
/// every order the planner combines it in, cold and warm, and the engine's
/// short read at the end of the file is not an error.
pub async fn partial_last_block<H: Harness>(h: &H) {
    let (n, tail) = (6u64, 4153usize);
    let len = n * BS as u64 + tail as u64;
    let (file, seed) = h.stamped_file_with_tail(n, BS, tail);
    let pool = BufferPool::new(64, BS).expect("pool");
    let what = "partial_last_block";
    match builder(&pool, h, file.clone()).build(source::forward(0..n + 1)) {
        Ok(_) => panic!("{what}: a stream over a {len}-byte file was built without a word"),
        Err(e) => {
            let msg = e.to_string();
            for part in [len.to_string(), BS.to_string(), tail.to_string()] {
                assert!(msg.contains(&part), "{what}: error must say {part}: {msg}");
            }
        }
    }
    assert_eq!(file.block_count(BS).expect("block_count").blocks(), n + 1);
    let want_tail = &stamp::page(seed, n, BS)[..tail];
    let orders: [(&str, Vec<BlockNumber>); 4] = [
        ("forward, cold", (0..=n).collect()),
        ("forward, warm", (0..=n).collect()),
        ("backward", (0..=n).rev().collect()),
        ("last block alone", vec![n, n - 1, n]),
    ];
    for (i, (order, blocks)) in orders.into_iter().enumerate() {
        // A fresh pool for the backward run and the last block alone, so
        // they read (not hit) the partial block.
        let fresh;
        let pool = if i >= 2 {
            fresh = BufferPool::new(64, BS).expect("pool");
            &fresh
        } else {
            &pool
        };
        let mut s = builder(pool, h, file.clone())
            .short_last_page(true)
            .max_ios(4)
            .io_combine_limit(8)
            .build(source::iter(blocks.clone()))
            .unwrap_or_else(|e| panic!("{what} ({order}): build: {e}"));
        assert_eq!(s.file_len(), len, "{what} ({order}): file_len");
        for &b in &blocks {
            let page = s
                .next()
                .await
                .unwrap_or_else(|| panic!("{what} ({order}): ended before block {b}"))
                .unwrap_or_else(|e| panic!("{what} ({order}): block {b}: {e}"));
            assert_eq!(page.block(), b, "{what} ({order}): wrong block");
            if b == n {
                assert_eq!(page.len(), tail, "{what} ({order}): short page's length");
                assert!(
                    &page[..] == want_tail,
                    "{what} ({order}): the short page holds the wrong bytes"
                );
            } else {
                assert!(
                    stamp::check(seed, b, &page),
                    "{what} ({order}): block {b} has wrong contents"
                );
            }
        }
        let e = s.next().await;
        assert!(e.is_none(), "{what} ({order}): more pages than asked for");
        s.close().await;
        assert_no_pins(pool, what);
    }
    // One block further is past the end, as ever.
    let mut s = builder(&pool, h, file)
        .short_last_page(true)
        .build(source::iter(vec![n + 1]))
        .expect("build");
    let e = expect_err(s.next().await, what);
    assert!(
        matches!(ReadError::from_io(&e), Some(ReadError::PastEnd { block, .. }) if *block == n + 1),
        "{what}: {e}"
    );
    s.close().await;
    assert_no_pins(&pool, what);
}

/// A consumer holding every frame gets a clear error, not a hang; the block
/// is not lost: once the consumer lets go, the stream continues with it.
pub async fn pool_exhausted<H: Harness>(h: &H) {
    let n = 32;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(8, BS).expect("pool");
    let mut s = builder(&pool, h, file)
        .max_ios(1)
        .io_combine_limit(1)
        .build(source::forward(0..n))
        .expect("build");
    let mut held = Vec::new();
    for i in 0..8 {
        let p = s.next().await.expect("page").expect("ok");
        assert_eq!(p.block(), i);
        held.push(p);
    }
    let e = expect_err(s.next().await, "pool_exhausted");
    assert!(
        matches!(
            ReadError::from_io(&e),
            Some(ReadError::PoolExhausted { frames: 8 })
        ),
        "pool_exhausted: wrong error {e}"
    );
    drop(held);
    let rest: Vec<_> = (8..n).collect();
    drain_verify(&mut s, seed, &rest, "pool_exhausted after release").await;
    s.close().await;
    assert_no_pins(&pool, "pool_exhausted");
}

/// EIO on one block inside combined reads: only that block errs (the
/// combined read is retried block by block), every other page is right, and
/// the failed block is not left valid in the pool. An engine whose reads
/// fail as a whole ([`EngineHints::retry_blocks`](crate::EngineHints) off)
/// hands the error out for every block of the failed read instead, each
/// named by its own block, and nothing else.
pub async fn eio_in_the_middle<H: Harness>(h: &H) {
    let n = 100;
    let bad = 37;
    let (file, seed) = h.stamped_file(n, BS);
    let id = file.id();
    let whole = !h.engine().hints(&file).retry_blocks;
    let pool = BufferPool::new(128, BS).expect("pool");
    let engine = Faulty::new(h.engine()).fail_block(bad);
    let mut s = ReadStream::builder(&pool, engine.clone(), file)
        .max_ios(4)
        .io_combine_limit(16)
        .full(true)
        .build(source::forward(0..n))
        .expect("build");
    let mut failed = Vec::new();
    let mut b = 0;
    while let Some(item) = s.next().await {
        match item {
            Ok(p) => {
                assert_ne!(p.block(), bad);
                assert!(
                    p.block() == b && stamp::check(seed, b, &p),
                    "eio: block {b}"
                );
            }
            Err(e) => {
                assert!(whole || b == bad, "eio: error at the wrong place: {e}");
                assert!(
                    matches!(ReadError::from_io(&e), Some(ReadError::Io { block, .. }) if *block == b),
                    "eio: error must name block {b}: {e}"
                );
                assert_eq!(e.raw_os_error(), None, "typed error wraps the source");
                failed.push(b);
            }
        }
        b += 1;
    }
    assert_eq!(b, n, "eio: every block once");
    assert_failed_run(&failed, bad, whole, "eio");
    let st = s.close().await;
    if !whole {
        assert!(st.retries > 0, "eio: combined read was not retried: {st}");
        assert!(engine.injected_eio() >= 2, "eio: fault not exercised");
    }
    for &f in &failed {
        assert!(!pool.contains(id, f), "eio: failed block {f} left valid");
    }
    assert_no_pins(&pool, "eio_in_the_middle");
}

/// The blocks that failed when one read covering `bad` failed: `bad`
/// alone, or (`whole`) one run of consecutive blocks holding it, at most a
/// read long.
fn assert_failed_run(failed: &[BlockNumber], bad: BlockNumber, whole: bool, what: &str) {
    if !whole {
        assert_eq!(failed, [bad], "{what}: one error, at block {bad}");
        return;
    }
    let mut sorted = failed.to_vec();
    sorted.sort_unstable();
    let (lo, hi) = (sorted[0], sorted[sorted.len() - 1]);
    assert!(
        lo <= bad && bad <= hi && hi - lo + 1 == sorted.len() as u64,
        "{what}: the failed read's blocks must fail, and no others: {failed:?}"
    );
    assert!(
        sorted.len() <= crate::MAX_IO_COMBINE_LIMIT,
        "{what}: more blocks failed than one read holds: {failed:?}"
    );
}

/// EIO inside a descending run: same as forward.
pub async fn eio_in_backward_run<H: Harness>(h: &H) {
    let n = 64;
    let bad = 20;
    let (file, seed) = h.stamped_file(n, BS);
    let whole = !h.engine().hints(&file).retry_blocks;
    let pool = BufferPool::new(128, BS).expect("pool");
    let engine = Faulty::new(h.engine()).fail_block(bad);
    let mut s = ReadStream::builder(&pool, engine, file)
        .full(true)
        .build(source::backward(0..n))
        .expect("build");
    let mut got = Vec::new();
    while let Some(item) = s.next().await {
        match item {
            Ok(p) => {
                assert!(stamp::check(seed, p.block(), &p));
                got.push(Ok(p.block()));
            }
            Err(e) => got.push(Err(ReadError::from_io(&e).map(|r| r.to_string()))),
        }
    }
    let want: Vec<_> = (0..n).rev().collect();
    assert_eq!(got.len(), want.len(), "eio_in_backward_run: count");
    let mut failed = Vec::new();
    for (g, w) in got.iter().zip(&want) {
        match g {
            Ok(b) => assert_eq!(b, w),
            Err(msg) => {
                assert!(
                    msg.as_deref()
                        .is_some_and(|m| m.starts_with(&format!("reading block {w}:"))),
                    "eio_in_backward_run: the error must name block {w}: {msg:?}"
                );
                failed.push(*w);
            }
        }
    }
    assert_failed_run(&failed, bad, whole, "eio_in_backward_run");
    s.close().await;
    assert_no_pins(&pool, "eio_in_backward_run");
}

/// Random short reads, forward and backward: every page still right (the
/// remainder is re-issued), backward runs still combined.
pub async fn short_reads<H: Harness>(h: &H) {
    let n = 256;
    let (file, seed) = h.stamped_file(n, BS);
    for (dir, expect) in [
        ("forward", (0..n).collect::<Vec<_>>()),
        ("backward", (0..n).rev().collect()),
    ] {
        let pool = BufferPool::new(512, BS).expect("pool");
        let engine = Faulty::new(h.engine()).short_reads(500, 3);
        let st = verified(
            ReadStream::builder(&pool, engine.clone(), file.clone())
                .full(true)
                .build(source::iter(expect.clone()))
                .expect("build"),
            seed,
            &expect,
            dir,
        )
        .await;
        assert!(
            engine.injected_short() > 10,
            "short_reads: fault not exercised"
        );
        assert_eq!(st.blocks_read, n, "short_reads {dir}: {st}");
        if dir == "backward" {
            assert!(st.backward_reads > 0, "short_reads: {st}");
        }
        assert_no_pins(&pool, "short_reads");
    }
}

/// A read that never completes: the stream is dropped, the read cancelled,
/// its frames return to empty (never valid), and the pool works after.
pub async fn stalled_read_cancelled<H: Harness>(h: &H) {
    let n = 100;
    let (file, seed) = h.stamped_file(n, BS);
    let id = file.id();
    let pool = BufferPool::new(128, BS).expect("pool");
    let stall = Stall::new(h.engine(), [50]);
    {
        let mut s = ReadStream::builder(&pool, stall.clone(), file.clone())
            .max_ios(4)
            .build(source::forward(0..n))
            .expect("build");
        for i in 0..30 {
            assert_eq!(s.next().await.expect("page").expect("ok").block(), i);
        }
    }
    // The stalled read may not have been issued yet if look-ahead stopped
    // short of block 50; either way nothing is valid for 50 now.
    stall.cancel_all();
    assert!(
        !pool.contains(id, 50),
        "stalled_read_cancelled: cancelled block is valid"
    );
    full_scan_afterwards(h, &pool, file, seed, n, "stalled_read_cancelled").await;
}

/// `max_ios` and `io_combine_limit` are never exceeded, including the
/// extremes (`max_ios = 0`: one read at a time).
pub async fn limits_hold<H: Harness>(h: &H) {
    let n = 300;
    let (file, seed) = h.stamped_file(n, BS);
    let expect: Vec<_> = (0..n).collect();
    for (max_ios, combine) in [(0, 1), (0, 16), (1, 128), (3, 5), (64, 1)] {
        let pool = BufferPool::new(512, BS).expect("pool");
        let st = verified(
            builder(&pool, h, file.clone())
                .max_ios(max_ios)
                .io_combine_limit(combine)
                .build(source::forward(0..n))
                .expect("build"),
            seed,
            &expect,
            "limits_hold",
        )
        .await;
        assert!(
            st.max_in_flight <= max_ios.max(1) as u64,
            "limits_hold {max_ios}/{combine}: {st}"
        );
        assert!(
            st.max_blocks_per_read <= combine as u64,
            "limits_hold {max_ios}/{combine}: {st}"
        );
        assert!(!(st.advice > 0 && max_ios == 0), "no advice at max_ios 0");
        assert_no_pins(&pool, "limits_hold");
    }
}

/// A ring keeps a large scan from flushing the pool.
pub async fn ring<H: Harness>(h: &H) {
    let n = 600;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(1024, BS).expect("pool");
    let expect: Vec<_> = (0..n).collect();
    verified(
        builder(&pool, h, file)
            .max_ios(2)
            .io_combine_limit(8)
            .ring(Some(RingSize::Frames(32)))
            .build(source::forward(0..n))
            .expect("build"),
        seed,
        &expect,
        "ring",
    )
    .await;
    let st = pool.stats();
    assert!(st.ring_reuses > 0, "ring: ring never reused: {st}");
    assert!(st.valid < 200, "ring: scan flushed the pool: {st}");
    assert_no_pins(&pool, "ring");
}

/// Bad configuration is rejected at build time, naming what is wrong.
pub async fn bad_configuration<H: Harness>(h: &H) {
    let (file, _) = h.stamped_file(4, BS);
    let pool = BufferPool::new(16, BS).expect("pool");
    let e = builder(&pool, h, file.clone())
        .io_combine_limit(0)
        .build(source::forward(0..4))
        .unwrap_err();
    assert!(e.to_string().contains("io_combine_limit"), "{e}");
    let e = builder(&pool, h, file.clone())
        .io_combine_limit(crate::MAX_IO_COMBINE_LIMIT + 1)
        .build(source::forward(0..4))
        .unwrap_err();
    assert!(e.to_string().contains("io_combine_limit"), "{e}");
    let e = builder(&pool, h, file.clone())
        .max_ios(5000)
        .build(source::forward(0..4))
        .unwrap_err();
    assert!(e.to_string().contains("max_ios"), "{e}");
    let e = builder(&pool, h, file)
        .ring(Some(RingSize::Frames(0)))
        .build(source::forward(0..4))
        .unwrap_err();
    assert!(e.to_string().contains("ring"), "{e}");
    let e = BufferPool::new(16, 1000).unwrap_err();
    assert!(e.to_string().contains("power of two"), "{e}");
    let e = BufferPool::new(0, BS).unwrap_err();
    assert!(e.to_string().contains("frames"), "{e}");
    assert_eq!(
        io::Error::from(BufferPool::new(16, 256).unwrap_err()).kind(),
        io::ErrorKind::InvalidInput
    );
}

/// Per-block user data reaches the consumer with its block, also through
/// backward runs and retries.
pub async fn user_data_travels<H: Harness>(h: &H) {
    let n = 50;
    let (file, seed) = h.stamped_file(n, BS);
    let pool = BufferPool::new(64, BS).expect("pool");
    let items: Vec<(u64, String)> = (0..n)
        .rev()
        .chain(10..20)
        .map(|b| (b, format!("tuple offsets of {b}")))
        .collect();
    let mut s = builder(&pool, h, file)
        .full(true)
        .build(source::with_data(items.clone()))
        .expect("build");
    let mut i = 0;
    while let Some(p) = s.next().await {
        let p = p.expect("ok");
        assert_eq!((p.block(), p.data()), (items[i].0, &items[i].1));
        assert!(stamp::check(seed, p.block(), &p));
        i += 1;
    }
    assert_eq!(i, items.len());
    s.close().await;
    assert_no_pins(&pool, "user_data_travels");
}
