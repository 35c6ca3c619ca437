//! What a stream does with sources that misbehave or run far past the end
//! of the file: a source that says `None` and later `Some` (the end is final
//! until `reset`), blocks past the end (they count against the look-ahead
//! like pages, so a huge source is pulled only as far as the distance), and
//! a source that panics inside a poll (dropping the stream still releases
//! every pin).

use futures::task::noop_waker;
use futures::Stream;
use pagestream::source::{self, BlockSource};
use pagestream::testing::{stamp, MemEngine, MemFile, Stall};
use pagestream::{
    BlockNumber, BufferPool, IoEngine, PageGuard, ReadError, ReadRequest, ReadStream,
};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

const BS: usize = 8192;

/// Polls until an item or the end, at most `polls` times (a noop waker: a
/// `Pending` is simply polled again), so a stream that never makes progress
/// fails the test instead of hanging it.
fn next_bounded<S: Stream + Unpin>(s: &mut S, polls: usize) -> Option<S::Item> {
    let waker = noop_waker();
    let mut cx = Context::from_waker(&waker);
    for _ in 0..polls {
        if let Poll::Ready(x) = Pin::new(&mut *s).poll_next(&mut cx) {
            return x;
        }
    }
    panic!("no item and no end after {polls} polls: the stream hangs");
}

/// Counts the blocks pulled from the source it wraps, and refuses to be
/// pulled more than `limit` times (a look-ahead that pulls without bound
/// fails here instead of growing memory until the machine runs out).
struct Counting<S> {
    inner: S,
    pulled: Arc<AtomicU64>,
    limit: u64,
}

impl<S: BlockSource> BlockSource for Counting<S> {
    type Data = S::Data;
    fn next_block(&mut self) -> Option<(BlockNumber, S::Data)> {
        let n = self.pulled.fetch_add(1, Ordering::Relaxed) + 1;
        assert!(
            n <= self.limit,
            "the stream pulled {n} blocks from the source: look-ahead is unbounded"
        );
        self.inner.next_block()
    }
}

/// Yields `blocks`, then `None`, then (if asked again, which it must not
/// be) `Some(after)` forever; records every call after the `None`.
struct NotFused {
    blocks: std::vec::IntoIter<BlockNumber>,
    ended: bool,
    after: BlockNumber,
    asked_after_end: Arc<AtomicU64>,
}

impl BlockSource for NotFused {
    type Data = ();
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        if self.ended {
            self.asked_after_end.fetch_add(1, Ordering::Relaxed);
            return Some((self.after, ()));
        }
        match self.blocks.next() {
            Some(b) => Some((b, ())),
            None => {
                self.ended = true;
                None
            }
        }
    }
}

fn past_end_block(e: &io::Error) -> BlockNumber {
    match ReadError::from_io(e) {
        Some(ReadError::PastEnd { block, .. }) => *block,
        other => panic!("want a PastEnd error, got {other:?} ({e})"),
    }
}

/// Item 4: the end of a source is final until `reset`. Block 2 is cached,
/// so starting the pending read `1, 2, 3` (the source ended after 3) issues
/// the read of 1, pins the hit 2 and leaves 3 pending: the planner used to
/// ask the ended source again there.
#[test]
fn a_source_that_says_none_is_not_asked_again() {
    let pool = BufferPool::new(64, BS).unwrap();
    let engine = MemEngine::new();
    let file = engine.create_stamped(8, BS);
    {
        let mut warm = ReadStream::builder(&pool, engine.clone(), file.clone())
            .build(source::iter([2]))
            .unwrap();
        assert_eq!(next_bounded(&mut warm, 100).unwrap().unwrap().block(), 2);
        assert!(next_bounded(&mut warm, 100).is_none());
    }
    for full in [true, false] {
        let asked = Arc::new(AtomicU64::new(0));
        let src = NotFused {
            blocks: vec![1, 2, 3].into_iter(),
            ended: false,
            after: 5,
            asked_after_end: Arc::clone(&asked),
        };
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .full(full)
            .build(src)
            .unwrap();
        let mut got = Vec::new();
        while let Some(page) = next_bounded(&mut s, 1000) {
            got.push(page.unwrap().block());
            assert!(got.len() <= 3, "full {full}: pages after the end: {got:?}");
        }
        assert_eq!(got, [1, 2, 3], "full {full}");
        assert_eq!(
            asked.load(Ordering::Relaxed),
            0,
            "full {full}: the source was asked again after it said None"
        );
        // The end stays the end.
        assert!(next_bounded(&mut s, 1000).is_none(), "full {full}");
        assert_eq!(asked.load(Ordering::Relaxed), 0, "full {full}");
        drop(s);
        assert_eq!(pool.stats().pinned, 0, "full {full}: pins left");
    }
}

/// Item 4, after `reset`: a new source is asked again from its start.
#[test]
fn reset_forgets_the_end_of_the_source() {
    let pool = BufferPool::new(16, BS).unwrap();
    let engine = MemEngine::new();
    let file = engine.create_stamped(8, BS);
    let mut s = ReadStream::builder(&pool, engine, file)
        .build(source::with_data(vec![(0u64, 'a')]))
        .unwrap();
    assert_eq!(next_bounded(&mut s, 100).unwrap().unwrap().data(), &'a');
    assert!(next_bounded(&mut s, 100).is_none());
    s.reset(source::with_data(vec![(4u64, 'b'), (5, 'c')]));
    let got: Vec<char> = std::iter::from_fn(|| next_bounded(&mut s, 100))
        .map(|p| *p.unwrap().data())
        .collect();
    assert_eq!(got, ['b', 'c']);
}

/// Item 5: a source naming a million blocks of a 4-block file is pulled only
/// as far as the look-ahead distance ahead of the consumer.
#[test]
fn past_end_blocks_count_against_the_look_ahead() {
    let frames = 64;
    let pool = BufferPool::new(frames, BS).unwrap();
    let engine = MemEngine::new();
    let file = engine.create_stamped(4, BS);
    let pulled = Arc::new(AtomicU64::new(0));
    let src = Counting {
        inner: source::forward(0..1_000_000),
        pulled: Arc::clone(&pulled),
        limit: 100_000,
    };
    let mut s = ReadStream::builder(&pool, engine, file).build(src).unwrap();
    // The distance never exceeds the frames the pool can spare (here the
    // whole pool, below the pin budget); the planner may hold one block
    // it took from the source but could not queue yet.
    let ahead_max = frames as u64 + 1;
    for i in 0..200u64 {
        let item = next_bounded(&mut s, 1000).expect("the source is not done");
        match item {
            Ok(page) => {
                assert!(i < 4, "item {i} is a page");
                assert_eq!(page.block(), i);
            }
            Err(e) => {
                assert!(i >= 4, "item {i}: {e}");
                assert_eq!(past_end_block(&e), i, "each error names its block");
            }
        }
        let ahead = pulled.load(Ordering::Relaxed) - (i + 1);
        assert!(
            ahead <= ahead_max,
            "after {} items the source was pulled {} blocks ahead (cap {ahead_max})",
            i + 1,
            ahead
        );
    }
}

/// Item 5: `forward(0..u64::MAX)` on a 4-block file yields the 4 pages,
/// then each past-end block as an error in its place, one at a time.
#[test]
fn an_endless_source_past_the_end_yields_errors_one_at_a_time() {
    let pool = BufferPool::new(64, BS).unwrap();
    let engine = MemEngine::new();
    let file = engine.create_stamped(4, BS);
    for fast_path in [true, false] {
        let pulled = Arc::new(AtomicU64::new(0));
        let src = Counting {
            inner: source::forward(0..u64::MAX),
            pulled: Arc::clone(&pulled),
            limit: 100_000,
        };
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .fast_path(fast_path)
            .build(src)
            .unwrap();
        let items: Vec<io::Result<PageGuard<()>>> = (0..10)
            .map(|_| next_bounded(&mut s, 1000).expect("endless source"))
            .collect();
        for (i, item) in items.iter().enumerate() {
            match item {
                Ok(page) if i < 4 => assert_eq!(page.block(), i as u64),
                Err(e) if i >= 4 => assert_eq!(past_end_block(e), i as u64),
                Ok(page) => panic!("item {i}: page {} past the end", page.block()),
                Err(e) => panic!("item {i}: {e}"),
            }
        }
        assert!(
            pulled.load(Ordering::Relaxed) <= 10 + 65,
            "fast path {fast_path}: {} blocks pulled for 10 items",
            pulled.load(Ordering::Relaxed)
        );
    }
}

/// Names blocks 0, 1, 2, 3 (its `n`th call names block `n - 1`), then ends;
/// panics on its `at`th call instead.
struct PanicAt {
    calls: u64,
    at: u64,
}

impl BlockSource for PanicAt {
    type Data = ();
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        self.calls += 1;
        assert!(
            self.calls != self.at,
            "the source panics (call {})",
            self.calls
        );
        (self.calls <= 4).then_some((self.calls - 1, ()))
    }
}

/// Item 8: a source that panics inside a poll leaks no pin. With one frame,
/// a leaked pin would make the pool unusable for every later stream.
#[test]
fn a_source_that_panics_leaks_no_pin() {
    let pool = BufferPool::new(1, BS).unwrap();
    let engine = MemEngine::new();
    let file = engine.create_stamped(4, BS);
    for fast_path in [true, false] {
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .fast_path(fast_path)
            .build(PanicAt { calls: 0, at: 2 })
            .unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| next_bounded(&mut s, 1000)));
        assert!(
            r.is_err(),
            "fast path {fast_path}: the source's panic comes out of poll_next"
        );
        drop(s);
        assert_eq!(
            pool.stats().pinned,
            0,
            "fast path {fast_path}: a pin outlived the stream"
        );
        let mut t = ReadStream::builder(&pool, engine.clone(), file.clone())
            .build(source::forward(3..4))
            .unwrap();
        let page = next_bounded(&mut t, 1000)
            .expect("a page")
            .expect("the pool has a free frame");
        assert_eq!(page.block(), 3);
        drop(page);
        drop(t);
        assert_eq!(pool.stats().pinned, 0);
    }
}

/// Item 8: a stream polled again after its source panicked goes on: the page
/// it was handing out when the source panicked is handed out, in order.
#[test]
fn a_stream_goes_on_after_its_source_panicked() {
    let pool = BufferPool::new(8, BS).unwrap();
    let engine = MemEngine::new();
    let file = engine.create_stamped(4, BS);
    let mut s = ReadStream::builder(&pool, engine, file)
        .build(PanicAt { calls: 0, at: 2 })
        .unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| next_bounded(&mut s, 1000)));
    assert!(r.is_err());
    let got: Vec<BlockNumber> = std::iter::from_fn(|| next_bounded(&mut s, 1000))
        .take(10)
        .map(|p| p.unwrap().block())
        .collect();
    // Block 0 (taken before the panic), then the blocks the source names
    // after it (its 3rd call names block 2, its 4th block 3).
    assert_eq!(got, [0, 2, 3]);
    drop(s);
    assert_eq!(pool.stats().pinned, 0);
}

/// Panics once, in `advise` or in `start_read` (after taking the request,
/// as an engine that panics half-way through submitting would).
#[derive(Clone)]
struct PanicOnce {
    inner: MemEngine,
    in_advise: bool,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl IoEngine for PanicOnce {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        if !self.in_advise && self.armed.swap(false, Ordering::Relaxed) {
            drop(req);
            panic!("the engine panics in start_read");
        }
        self.inner.start_read(file, req);
    }
    fn hints(&self, _file: &MemFile) -> pagestream::EngineHints {
        pagestream::EngineHints::new().with_advice(true)
    }
    fn advise(&self, _file: &MemFile, _offset: u64, _len: u64) -> bool {
        assert!(
            !(self.in_advise && self.armed.swap(false, Ordering::Relaxed)),
            "the engine panics in advise"
        );
        true
    }
    fn name(&self) -> &'static str {
        "panic-once"
    }
}

/// Item 8, engine side: an engine that panics while a read is being started
/// (in its advice, or in `start_read` itself) leaves no frame pinned and no
/// frame in IO without a read to end it: the stream is dropped, and the
/// one frame of the pool can read the same block again.
#[test]
fn an_engine_that_panics_starting_a_read_strands_no_frame() {
    for in_advise in [true, false] {
        let pool = BufferPool::new(1, BS).unwrap();
        let mem = MemEngine::new();
        let file = mem.create_stamped(4, BS);
        let engine = PanicOnce {
            inner: mem,
            in_advise,
            armed: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        };
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .build(source::forward(0..4))
            .unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| next_bounded(&mut s, 1000)));
        assert!(
            r.is_err(),
            "advise {in_advise}: the engine's panic comes out"
        );
        drop(s);
        let st = pool.stats();
        assert_eq!(
            (st.pinned, st.reading),
            (0, 0),
            "advise {in_advise}: a frame pinned or in IO outlived the stream"
        );
        let mut t = ReadStream::builder(&pool, engine, file)
            .build(source::forward(0..1))
            .unwrap();
        let page = next_bounded(&mut t, 1000)
            .expect("a page")
            .expect("block 0");
        assert_eq!(page.block(), 0);
    }
}

/// Polls `s` to its end, catching panics out of `poll_next` (at most
/// `max_panics` of them, and `max_items` items at most). Returns the items
/// (block or error) and the number of panics caught.
fn drain_catching<E: IoEngine, S: BlockSource>(
    s: &mut ReadStream<E, S>,
    max_panics: usize,
    max_items: usize,
) -> (Vec<io::Result<PageGuard<S::Data>>>, usize) {
    let mut items = Vec::new();
    let mut panics = 0;
    loop {
        match catch_unwind(AssertUnwindSafe(|| next_bounded(&mut *s, 1000))) {
            Ok(None) => return (items, panics),
            Ok(Some(item)) => {
                items.push(item);
                assert!(items.len() <= max_items, "more items than the source names");
            }
            Err(_) => {
                panics += 1;
                assert!(
                    panics <= max_panics,
                    "{panics} panics out of poll_next, {max_panics} injected"
                );
            }
        }
    }
}

/// Checks that `items` are the pages of `blocks` in order, with their
/// stamped bytes, except that a block in `may_fail` may instead be the
/// error of its cancelled read.
fn check_pages<D>(
    items: &[io::Result<PageGuard<D>>],
    blocks: &[BlockNumber],
    seed: u64,
    may_fail: &[BlockNumber],
) {
    assert_eq!(items.len(), blocks.len(), "one item per block named");
    for (item, &b) in items.iter().zip(blocks) {
        match item {
            Ok(page) => {
                assert_eq!(page.block(), b, "pages out of order");
                assert!(stamp::check(seed, b, page), "block {b}: wrong bytes");
            }
            Err(e) => {
                assert!(may_fail.contains(&b), "block {b}: {e}");
                assert!(
                    matches!(ReadError::from_io(e), Some(ReadError::Cancelled { block }) if *block == b),
                    "block {b}: want its read's cancellation, got {e}"
                );
            }
        }
    }
}

/// An engine panic on the fast path: the first miss after a run of hits
/// (blocks 0..4 are cached, block 4 is not) panics in `start_read`. The
/// stream must leave the fast path before engine code runs: polled again,
/// it hands out the page it was handing out (block 3), then every later
/// block in order (block 4's read was dropped by the panic and is reported
/// cancelled in its place), and ends with nothing pinned.
#[test]
fn an_engine_panic_on_the_fast_path_leaves_it() {
    let pool = BufferPool::new(64, BS).unwrap();
    let mem = MemEngine::new();
    let file = mem.create_stamped(12, BS);
    {
        let mut warm = ReadStream::builder(&pool, mem.clone(), file.clone())
            .build(source::forward(0..4))
            .unwrap();
        while let Some(page) = next_bounded(&mut warm, 100) {
            page.unwrap();
        }
    }
    let engine = PanicOnce {
        inner: mem,
        in_advise: false,
        armed: Arc::new(std::sync::atomic::AtomicBool::new(true)),
    };
    let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
        .build(source::forward(0..12))
        .unwrap();
    let (items, panics) = drain_catching(&mut s, 1, 12);
    assert_eq!(panics, 1, "the engine's panic comes out of poll_next");
    assert!(
        s.stats().fast_path_pages > 0,
        "the scan never took the fast path"
    );
    let blocks: Vec<BlockNumber> = (0..12).collect();
    check_pages(&items, &blocks, file.seed(), &[4]);
    drop(items);
    drop(s);
    let st = pool.stats();
    assert_eq!(
        (st.pinned, st.reading),
        (0, 0),
        "a frame outlived the stream"
    );
}

/// A block taken from the source while a pending read is started is not
/// lost when the engine panics starting that read: source 0, 1, 2, 10 (as
/// a bitmap scan names them); block 10 ends the pending read 0..=2, whose
/// start panics. Polled on, the stream retries 0, 1, 2 and hands out 10.
#[test]
fn a_block_taken_before_an_engine_panic_is_not_lost() {
    let pool = BufferPool::new(64, BS).unwrap();
    let mem = MemEngine::new();
    let file = mem.create_stamped(16, BS);
    let engine = PanicOnce {
        inner: mem,
        in_advise: false,
        armed: Arc::new(std::sync::atomic::AtomicBool::new(true)),
    };
    let blocks = [0, 1, 2, 10];
    let mut s = ReadStream::builder(&pool, engine, file.clone())
        .full(true)
        .build(source::iter(blocks))
        .unwrap();
    let (items, panics) = drain_catching(&mut s, 1, blocks.len());
    assert_eq!(panics, 1, "the engine's panic comes out of poll_next");
    check_pages(&items, &blocks, file.seed(), &[]);
    drop(items);
    drop(s);
    let st = pool.stats();
    assert_eq!(
        (st.pinned, st.reading),
        (0, 0),
        "a frame outlived the stream"
    );
}

/// Data whose drop panics once, if armed.
struct Bomb(Option<Arc<std::sync::atomic::AtomicBool>>);

impl Drop for Bomb {
    fn drop(&mut self) {
        if let (Some(armed), false) = (&self.0, std::thread::panicking()) {
            assert!(
                !armed.swap(false, Ordering::Relaxed),
                "the data's drop panics"
            );
        }
    }
}

fn bombs(
    blocks: std::ops::Range<BlockNumber>,
    at: BlockNumber,
    armed: &Arc<std::sync::atomic::AtomicBool>,
) -> source::WithData<std::vec::IntoIter<(BlockNumber, Bomb)>> {
    source::with_data(
        blocks
            .map(|b| (b, Bomb((b == at).then(|| Arc::clone(armed)))))
            .collect::<Vec<_>>(),
    )
}

/// Holds the first read it is given (until [`HoldFirst::release`]) and
/// passes every other to its inner engine.
#[derive(Clone)]
struct HoldFirst<E: IoEngine> {
    inner: E,
    mem: MemEngine,
    first: Arc<std::sync::Mutex<Held>>,
}

#[derive(Default)]
struct Held {
    taken: bool,
    read: Option<(MemFile, ReadRequest)>,
}

impl<E: IoEngine> HoldFirst<E> {
    fn release(&self) {
        let held = self.first.lock().unwrap().read.take();
        let (file, req) = held.expect("the first read is held");
        self.mem.start_read(&file, req);
    }
}

#[deny(clippy::missing_trait_methods)]
impl<E: IoEngine<File = MemFile>> IoEngine for HoldFirst<E> {
    type File = MemFile;
    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        let mut first = self.first.lock().unwrap();
        if !first.taken {
            first.taken = true;
            first.read = Some((file.clone(), req));
            return;
        }
        drop(first);
        self.inner.start_read(file, req);
    }
    fn hints(&self, file: &MemFile) -> pagestream::EngineHints {
        self.inner.hints(file)
    }
    fn advise(&self, file: &MemFile, offset: u64, len: u64) -> bool {
        self.inner.advise(file, offset, len)
    }
    fn help(&self, file: &MemFile) -> bool {
        self.inner.help(file)
    }
    fn name(&self) -> &'static str {
        "hold-first"
    }
}

fn poll_once<S: Stream + Unpin>(s: &mut S) -> Poll<Option<S::Item>> {
    let waker = noop_waker();
    Pin::new(s).poll_next(&mut Context::from_waker(&waker))
}

/// A panic in the drop of the old look-ahead's data during `reset`, while
/// a read of the old blocks is in flight: the stream goes on from the new
/// source. The old read ends after the new one has started (and while the
/// new one is still held): its completion must not mark the new entries,
/// which take the old ones' places in the queue, ready over frames still
/// being read. Every page of the new source has its own bytes.
#[test]
fn a_panic_dropping_data_in_reset_leaves_the_stream_whole() {
    let pool = BufferPool::new(64, BS).unwrap();
    let mem = MemEngine::new();
    let file = mem.create_stamped(16, BS);
    let stall = Stall::every_read(mem.clone());
    let engine = HoldFirst {
        inner: stall.clone(),
        mem,
        first: Arc::default(),
    };
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    // One read of 0..8, and a second slot for the new source's read.
    let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
        .max_ios(2)
        .io_combine_limit(8)
        .full(true)
        .build(bombs(0..8, 3, &armed))
        .unwrap();
    assert!(poll_once(&mut s).is_pending(), "the read of 0..8 is held");
    assert_eq!(s.reads_in_flight(), 1);
    let r = catch_unwind(AssertUnwindSafe(|| s.reset(bombs(8..16, 99, &armed))));
    assert!(r.is_err(), "the data's panic comes out of reset");
    assert!(!armed.load(Ordering::Relaxed));
    // The new read starts and is held; then the old one ends.
    assert!(poll_once(&mut s).is_pending(), "the new read is held");
    engine.release();
    let mut got = Vec::new();
    for _ in 0..1000 {
        match poll_once(&mut s) {
            Poll::Ready(Some(page)) => {
                let page = page.unwrap();
                let b = page.block();
                assert!(
                    stamp::check(file.seed(), b, &page),
                    "block {b} handed out with bytes of block {:?}",
                    stamp::block_of(&page)
                );
                got.push(b);
            }
            Poll::Ready(None) => break,
            Poll::Pending => stall.release_all(),
        }
    }
    assert_eq!(got, (8..16).collect::<Vec<_>>());
    drop(s);
    let st = pool.stats();
    assert_eq!(
        (st.pinned, st.streams),
        (0, 0),
        "pins or a stream outlived it"
    );
}

/// A panic in the drop of the data still queued when the stream is dropped
/// leaves no pin and no claim on the pool behind.
#[test]
fn a_panic_dropping_data_in_drop_leaves_the_pool_whole() {
    let pool = BufferPool::new(64, BS).unwrap();
    let mem = MemEngine::new();
    let file = mem.create_stamped(16, BS);
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut s = ReadStream::builder(&pool, mem, file)
        .full(true)
        .build(bombs(0..8, 3, &armed))
        .unwrap();
    let first = next_bounded(&mut s, 100).unwrap().unwrap();
    assert_eq!(first.block(), 0);
    drop(first);
    assert_eq!(pool.stats().streams, 1);
    let r = catch_unwind(AssertUnwindSafe(move || drop(s)));
    assert!(r.is_err(), "the data's panic comes out of the drop");
    let st = pool.stats();
    assert_eq!(
        (st.pinned, st.streams),
        (0, 0),
        "pins or a stream outlived it"
    );
}
