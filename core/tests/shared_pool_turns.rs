//! A stream that finds every frame pinned by another stream's look-ahead
//! waits for that stream to run instead of reporting the pool exhausted.
//!
//! Two streams share a 16-frame pool on one task (`futures::join!`). The
//! first looked ahead alone and pins all 16 frames (its consumer holds one
//! page, its look-ahead the rest); it yields to the runtime after every
//! page (its yield budget), so it is paused when the second stream starts
//! with no frame to be had and nothing of its own in flight. The second
//! gives the runtime a turn, the first hands out a page and its consumer
//! lets the held one go, and both scans end with every page right.

use futures::executor::block_on;
use futures::StreamExt;
use pagestream::testing::{stamp, MemEngine, MemFile};
use pagestream::{source, BufferPool, PageGuard, ReadStream, YieldBudget};

const BS: usize = 8192;
const BLOCKS: u64 = 64;

/// Every item of `s`: the blocks of the pages and the errors, in order.
/// `held`, a page taken before, is dropped once the next item is in.
async fn scan<S>(mut s: S, seed: u64, mut held: Option<PageGuard<()>>) -> (Vec<u64>, Vec<String>)
where
    S: futures::Stream<Item = std::io::Result<PageGuard<()>>> + Unpin,
{
    let (mut blocks, mut errors) = (Vec::new(), Vec::new());
    while let Some(item) = s.next().await {
        held.take();
        match item {
            Ok(page) => {
                assert!(
                    stamp::check(seed, page.block(), &page),
                    "block {} wrong",
                    page.block()
                );
                blocks.push(page.block());
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    (blocks, errors)
}

#[test]
fn a_stream_waits_for_frames_another_streams_look_ahead_holds() {
    let pool = BufferPool::new(16, BS).expect("pool");
    let engine = MemEngine::new();
    let (fa, fb): (MemFile, MemFile) = (
        engine.create_stamped(BLOCKS, BS),
        engine.create_stamped(BLOCKS, BS),
    );
    let (sa, sb) = (fa.seed(), fb.seed());
    let mut a = ReadStream::builder(&pool, engine.clone(), fa)
        .max_ios(1)
        .io_combine_limit(16)
        .full(true)
        .yield_budget(YieldBudget::Items(1))
        .build(source::forward(0..BLOCKS))
        .expect("build a");
    // The first page, held: with it, `a` has every frame pinned.
    let first = block_on(a.next()).expect("a page").expect("block 0");
    assert_eq!(first.block(), 0);
    assert_eq!(
        pool.stats().pinned,
        16,
        "the first stream should hold the pool: {}",
        pool.stats()
    );
    let b = ReadStream::builder(&pool, engine, fb)
        .build(source::forward(0..BLOCKS))
        .expect("build b");
    let ((blocks_a, errors_a), (blocks_b, errors_b)) =
        block_on(async { futures::join!(scan(a, sa, Some(first)), scan(b, sb, None)) });
    assert_eq!(errors_a, Vec::<String>::new(), "first stream");
    assert_eq!(errors_b, Vec::<String>::new(), "second stream");
    assert_eq!(blocks_a, (1..BLOCKS).collect::<Vec<_>>());
    assert_eq!(blocks_b, (0..BLOCKS).collect::<Vec<_>>());
    assert_eq!(pool.stats().pinned, 0);
}
