//! The engine-facing API for engines whose reads arrive in pieces and are
//! worth aborting: `ReadRequest::abandoned` / `is_wanted`, `copy_at`,
//! `MAX_BUFFERS` runs per read (a huge read into scattered frames), and
//! `EngineHints::read_bytes` / `reads_in_flight`.
//!
//! The engine here holds every request it is given, so the test decides
//! when (and how) each read is filled and completed.

use futures::executor::block_on;
use futures::task::noop_waker;
use futures::{Stream, StreamExt};
use pagestream::testing::{stamp, MemEngine, MemFile, StampedFile};
use pagestream::{
    source, BlockSource, BufferPool, EngineFile, EngineHints, IoEngine, PageGuard, ReadFilter,
    ReadRequest, ReadStream, YieldBudget, MAX_BUFFERS, MAX_IOS, MAX_IO_COMBINE_LIMIT,
};
use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

type Queue = Arc<Mutex<Vec<ReadRequest>>>;

/// Holds every request; reports `hints`.
#[derive(Clone, Default)]
struct Holding {
    held: Queue,
    hints: EngineHints,
}

impl Holding {
    fn with_hints(hints: EngineHints) -> Self {
        Holding {
            held: Queue::default(),
            hints,
        }
    }

    fn take(&self) -> Vec<ReadRequest> {
        std::mem::take(&mut *self.held.lock().unwrap())
    }
}

impl IoEngine for Holding {
    type File = MemFile;

    fn start_read(&self, _file: &MemFile, req: ReadRequest) {
        self.held.lock().unwrap().push(req);
    }

    fn hints(&self, _file: &MemFile) -> EngineHints {
        self.hints
    }

    fn name(&self) -> &'static str {
        "holding"
    }
}

/// A waker that records whether it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Flag {
    /// Whether it was woken since the last call.
    fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }
}

fn poll_with<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

/// Polls `s` once with a no-op waker: it looks ahead and starts reads.
fn poll_stream<E: IoEngine, S: BlockSource>(s: &mut ReadStream<E, S>) -> bool {
    let w = noop_waker();
    Pin::new(s)
        .poll_next(&mut Context::from_waker(&w))
        .is_pending()
}

/// Fills `req` from `file` with one `copy_at` and completes it.
fn fill(file: &MemFile, mut req: ReadRequest) {
    let off = req.offset() as usize;
    let len = req.len_bytes();
    assert_eq!(req.copy_at(0, &file.bytes()[off..off + len]), len);
    assert!(
        req.complete(Ok(len)).is_none(),
        "a full read left a remainder"
    );
}

const BS: usize = 4096;

/// A stream over `file` on the holding engine, 2 reads of 4 blocks.
fn held_stream(
    pool: &BufferPool,
    engine: &Holding,
    file: &MemFile,
    blocks: std::ops::Range<u64>,
) -> ReadStream<Holding, impl BlockSource<Data = ()>> {
    ReadStream::builder(pool, engine.clone(), file.clone())
        .max_ios(2)
        .io_combine_limit(4)
        .full(true)
        .build(source::iter(blocks.collect::<Vec<_>>()))
        .unwrap()
}

#[test]
fn abandoned_is_pending_while_the_stream_lives_and_ready_once_it_is_dropped() {
    let mem = MemEngine::new();
    let file = mem.create_stamped(32, BS);
    let pool = BufferPool::new(64, BS).unwrap();
    let engine = Holding::default();
    let mut s = held_stream(&pool, &engine, &file, 0..32);
    assert!(poll_stream(&mut s));
    let mut held = engine.take();
    assert!(!held.is_empty(), "the stream started no read");
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(Arc::clone(&flag));
    let mut abandoned: Vec<_> = held.iter().map(ReadRequest::abandoned).collect();
    for a in &mut abandoned {
        assert!(poll_with(a, &waker).is_pending(), "abandoned while wanted");
    }
    assert!(held.iter().all(ReadRequest::is_wanted));
    // Polled again with nothing released: still pending, no wake-up.
    assert!(poll_with(&mut abandoned[0], &waker).is_pending());
    assert!(!flag.take());
    drop(s);
    assert!(flag.take(), "dropping the stream woke no watcher");
    for a in &mut abandoned {
        assert!(
            poll_with(a, &waker).is_ready(),
            "still wanted after the drop"
        );
    }
    assert!(held.iter().all(|r| !r.is_wanted()));
    // Dropping the requests ends the reads with their frames empty.
    held.clear();
    let st = pool.stats();
    assert_eq!((st.pinned, st.reading, st.valid), (0, 0, 0), "{st}");
}

#[test]
fn abandoned_is_ready_once_the_stream_is_reset() {
    let mem = MemEngine::new();
    let file = mem.create_stamped(32, BS);
    let pool = BufferPool::new(64, BS).unwrap();
    let engine = Holding::default();
    let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
        .max_ios(2)
        .io_combine_limit(4)
        .full(true)
        .build(source::iter((0..32).collect::<Vec<u64>>()))
        .unwrap();
    assert!(poll_stream(&mut s));
    let held = engine.take();
    assert!(!held.is_empty());
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(Arc::clone(&flag));
    let mut a = held[0].abandoned();
    assert!(poll_with(&mut a, &waker).is_pending());
    s.reset(source::iter(vec![20u64, 21]));
    assert!(flag.take(), "the reset woke no watcher");
    assert!(
        poll_with(&mut a, &waker).is_ready(),
        "wanted after the reset"
    );
    assert!(!held[0].is_wanted());
    drop(held);
    // The stream goes on with its new source.
    assert!(poll_stream(&mut s));
    for req in engine.take() {
        fill(&file, req);
    }
    let got: Vec<u64> = block_on(async {
        let mut v = Vec::new();
        while let Some(p) = s.next().await {
            let p = p.unwrap();
            assert!(stamp::check(file.seed(), p.block(), &p));
            v.push(p.block());
        }
        v
    });
    assert_eq!(got, [20, 21]);
}

/// A read whose stream is dropped while another stream waits for its pages
/// (it found them being read and pinned them) stays wanted; completed, it
/// serves that stream.
#[test]
fn abandoned_stays_pending_while_another_stream_waits_for_the_pages() {
    let mem = MemEngine::new();
    let file = mem.create_stamped(32, BS);
    let pool = BufferPool::new(64, BS).unwrap();
    let engine = Holding::default();
    let mut a = held_stream(&pool, &engine, &file, 0..32);
    assert!(poll_stream(&mut a));
    let mut held = engine.take();
    let first = held.remove(0);
    let blocks = first.first_block()..first.first_block() + first.nblocks() as u64;
    drop(held); // A's other reads: cancelled
    let mut b = held_stream(&pool, &engine, &file, blocks.clone());
    assert!(poll_stream(&mut b), "B got a page of a read still held");
    assert!(engine.take().is_empty(), "B read blocks A is reading");
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(Arc::clone(&flag));
    let mut ab = first.abandoned();
    assert!(poll_with(&mut ab, &waker).is_pending());
    drop(a);
    assert!(flag.take(), "dropping A woke no watcher");
    assert!(
        poll_with(&mut ab, &waker).is_pending(),
        "abandoned while B waits for its pages"
    );
    assert!(first.is_wanted());
    fill(&file, first);
    let got: Vec<PageGuard> = block_on(b.by_ref().map(Result::unwrap).collect());
    let want: Vec<u64> = blocks.collect();
    assert_eq!(got.iter().map(PageGuard::block).collect::<Vec<_>>(), want);
    for p in &got {
        assert!(
            stamp::check(file.seed(), p.block(), p),
            "block {}",
            p.block()
        );
    }
    drop(got);
    block_on(b.close());
    let st = pool.stats();
    assert_eq!((st.pinned, st.reading), (0, 0), "{st}");
}

/// Pins every other frame of `pool` (guards on the even blocks of a file
/// read into a fresh pool, which hands out frames in order) and returns the
/// guards: the frames free for the next read are then scattered, no two
/// adjacent.
fn pin_alternate_frames(pool: &BufferPool) -> Vec<PageGuard> {
    let n = pool.frames() as u64;
    let mem = MemEngine::new();
    let file = mem.create_stamped(n, pool.block_size());
    let mut s = ReadStream::builder(pool, mem, file)
        .build(source::forward(0..n))
        .unwrap();
    let kept: Vec<PageGuard> = block_on(async {
        let mut kept = Vec::new();
        while let Some(p) = s.next().await {
            let p = p.unwrap();
            if p.frame() % 2 == 0 {
                kept.push(p);
            }
        }
        kept
    });
    drop(s);
    assert_eq!(
        kept.len() as u64,
        n / 2,
        "the file's blocks did not go one to a frame"
    );
    kept
}

#[test]
fn copy_at_fills_scattered_frames_at_the_right_offsets() {
    let pool = BufferPool::new(16, BS).unwrap();
    let _pins = pin_alternate_frames(&pool);
    let mem = MemEngine::new();
    let file = mem.create_stamped(8, BS);
    let engine = Holding::default();
    for short in [false, true] {
        pool.invalidate(file.id());
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .max_ios(1)
            .io_combine_limit(8)
            .full(true)
            .build(source::forward(0..8))
            .unwrap();
        assert!(poll_stream(&mut s));
        let mut held = engine.take();
        assert_eq!(held.len(), 1, "one read of the 8 blocks");
        let mut req = held.pop().unwrap();
        assert_eq!((req.first_block(), req.nblocks()), (0, 8));
        assert_eq!(req.buffers_mut().len(), 8, "the frames are not scattered");
        let len = req.len_bytes();
        let bytes = file.bytes().to_vec();
        if short {
            // A short read ending inside a block: the remainder starts
            // there, and its `copy_at(0, …)` writes the rest of that block.
            let cut = 3 * BS + 1234;
            for at in (0..cut).step_by(1000).rev() {
                let end = (at + 1000).min(cut);
                assert_eq!(req.copy_at(at, &bytes[at..end]), end - at);
            }
            let mut rest = req.complete(Ok(cut)).expect("a remainder");
            assert_eq!(rest.offset(), cut as u64);
            assert_eq!(rest.len_bytes(), len - cut);
            assert_eq!(rest.copy_at(0, &bytes[cut..]), len - cut);
            assert!(rest.complete(Ok(len - cut)).is_none());
        } else {
            // Pieces of odd sizes, last first, each straddling frames.
            for at in (0..len).step_by(1000).rev() {
                let end = (at + 1000).min(len);
                assert_eq!(req.copy_at(at, &bytes[at..end]), end - at);
            }
            // Past the end of the read: only what fits is copied.
            assert_eq!(req.copy_at(len - 100, &bytes[len - 100..]), 100);
            assert_eq!(req.copy_at(len, &[0u8; 10]), 0);
            assert!(req.complete(Ok(len)).is_none());
        }
        let pages: Vec<PageGuard> = block_on(s.by_ref().map(Result::unwrap).collect());
        assert_eq!(pages.len(), 8);
        for (b, p) in pages.iter().enumerate() {
            assert_eq!(p.block(), b as u64);
            assert!(
                stamp::check(file.seed(), b as u64, p),
                "short={short}: block {b}"
            );
        }
        drop(pages);
        block_on(s.close());
    }
}

/// Blocks in the huge read below: more than [`MAX_BUFFERS`] runs of one
/// frame each.
const HUGE: usize = MAX_BUFFERS + 100;

#[test]
fn a_read_into_more_than_max_buffers_runs_is_done_in_parts() {
    let pool = BufferPool::new(2 * HUGE, 512).unwrap();
    let _pins = pin_alternate_frames(&pool);
    let mem = MemEngine::new();
    let file = mem.create_stamped(HUGE as u64, 512);
    let engine = Holding::default();
    let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
        .max_ios(1)
        .io_combine_limit(HUGE)
        .full(true)
        .build(source::forward(0..HUGE as u64))
        .unwrap();
    assert!(poll_stream(&mut s));
    let mut held = engine.take();
    assert_eq!(held.len(), 1);
    let mut req = held.pop().unwrap();
    assert_eq!(req.nblocks(), HUGE, "not one read of every block");
    assert_eq!(req.raw_buffers().len(), MAX_BUFFERS);
    // Read like `preadv`: into the buffers given, a short read.
    let mut n = 0;
    for mut b in req.buffers_mut().into_iter().take(MAX_BUFFERS + 1) {
        let src = &file.bytes()[n..n + b.len()];
        b.copy_from_slice(src);
        n += src.len();
    }
    assert_eq!(n, MAX_BUFFERS * 512, "the first buffers are one frame each");
    let mut rest = req.complete(Ok(n)).expect("a remainder");
    assert_eq!(rest.first_block(), MAX_BUFFERS as u64);
    assert_eq!(rest.nblocks(), HUGE - MAX_BUFFERS);
    let mut m = 0;
    for mut b in rest.buffers_mut() {
        let src = &file.bytes()[n + m..n + m + b.len()];
        b.copy_from_slice(src);
        m += src.len();
    }
    assert_eq!(m, (HUGE - MAX_BUFFERS) * 512);
    assert!(rest.complete(Ok(m)).is_none());
    let pages: Vec<PageGuard> = block_on(s.by_ref().map(Result::unwrap).collect());
    assert_eq!(pages.len(), HUGE);
    for (b, p) in pages.iter().enumerate() {
        assert!(p.block() == b as u64 && stamp::check(file.seed(), b as u64, p));
    }
    drop(pages);
    let st = block_on(s.close());
    assert_eq!((st.reads, st.blocks_read), (1, HUGE as u64), "{st}");
}

/// The results the engine reported, with the length each read asked for.
#[derive(Default)]
struct Results(Mutex<Vec<(u64, usize, usize)>>);

impl ReadFilter for Results {
    fn filter(&self, req: &ReadRequest, result: io::Result<usize>) -> io::Result<usize> {
        if let Ok(n) = &result {
            self.0
                .lock()
                .unwrap()
                .push((req.first_block(), req.len_bytes(), *n));
        }
        result
    }
}

/// Passes reads to the thread-pool engine, recording their results.
#[derive(Clone)]
struct Recorded {
    inner: ThreadPoolEngine,
    results: Arc<Results>,
}

impl IoEngine for Recorded {
    type File = ThreadPoolFile;

    fn start_read(&self, file: &ThreadPoolFile, mut req: ReadRequest) {
        req.add_filter(Arc::clone(&self.results) as Arc<dyn ReadFilter>);
        self.inner.start_read(file, req);
    }

    fn hints(&self, file: &ThreadPoolFile) -> EngineHints {
        self.inner.hints(file)
    }

    fn advise(&self, file: &ThreadPoolFile, offset: u64, len: u64) -> bool {
        self.inner.advise(file, offset, len)
    }

    fn help(&self, file: &ThreadPoolFile) -> bool {
        self.inner.help(file)
    }

    fn name(&self) -> &'static str {
        "recorded threadpool"
    }
}

/// The thread-pool engine reads a read into more than `MAX_BUFFERS`
/// scattered frames correctly: a short read of the first `MAX_BUFFERS`
/// runs, then the remainder.
#[test]
fn threadpool_reads_more_than_max_buffers_runs_as_a_short_read_and_remainder() {
    let pool = BufferPool::new(2 * HUGE, 512).unwrap();
    let _pins = pin_alternate_frames(&pool);
    let f = StampedFile::new("max-buffers", HUGE as u64, 512);
    let engine = Recorded {
        inner: ThreadPoolEngine::new(),
        results: Arc::default(),
    };
    let file = ThreadPoolFile::open(f.path()).unwrap();
    let mut s = ReadStream::builder(&pool, engine.clone(), file)
        .max_ios(1)
        .io_combine_limit(HUGE)
        .full(true)
        .build(source::forward(0..HUGE as u64))
        .unwrap();
    let pages: Vec<PageGuard> = block_on(s.by_ref().map(Result::unwrap).collect());
    assert_eq!(pages.len(), HUGE);
    for (b, p) in pages.iter().enumerate() {
        assert!(
            p.block() == b as u64 && stamp::check(f.seed(), b as u64, p),
            "block {b}"
        );
    }
    drop(pages);
    let st = block_on(s.close());
    assert_eq!((st.reads, st.blocks_read), (1, HUGE as u64), "{st}");
    let results = engine.results.0.lock().unwrap().clone();
    let (first, len, n) = results[0];
    assert_eq!((first, len), (0, HUGE * 512), "{results:?}");
    assert_eq!(
        n,
        MAX_BUFFERS * 512,
        "not a short read of MAX_BUFFERS runs: {results:?}"
    );
    let rest: usize = results[1..].iter().map(|r| r.2).sum();
    assert_eq!(n + rest, HUGE * 512, "{results:?}");
    assert_eq!(results[1].0, MAX_BUFFERS as u64, "{results:?}");
}

/// The most reads in flight at once, and the largest read, of a forward
/// scan of 2048 blocks over `engine`, by a stream `build` sets up: the
/// reads are held and completed in rounds, each round all the stream
/// starts before it has to wait.
fn read_shape(
    engine: &Holding,
    build: impl FnOnce(
        pagestream::StreamBuilder<Holding, source::Forward>,
    ) -> pagestream::StreamBuilder<Holding, source::Forward>,
) -> (usize, usize) {
    let n = 2048;
    let mem = MemEngine::new();
    let file = mem.create_stamped(n, 512);
    let pool = BufferPool::new(4096, 512).unwrap();
    // No yields: a yield's `Pending` would end a round early, wherever the
    // clock happened to be (the default budget is a time).
    let b = ReadStream::builder(&pool, engine.clone(), file.clone())
        .yield_budget(YieldBudget::Unlimited);
    let mut s = build(b).build(source::forward(0..n)).unwrap();
    let w = noop_waker();
    let mut cx = Context::from_waker(&w);
    let (mut in_flight, mut largest, mut pages, mut idle) = (0, 0, 0, 0);
    loop {
        match Pin::new(&mut s).poll_next(&mut cx) {
            Poll::Ready(Some(p)) => {
                let p = p.unwrap();
                assert!(stamp::check(file.seed(), pages, &p));
                pages += 1;
                idle = 0;
            }
            Poll::Ready(None) => break,
            Poll::Pending => {
                let held = engine.take();
                // Pending with no read held: the stream waits for none.
                idle = if held.is_empty() { idle + 1 } else { 0 };
                assert!(idle < 2, "the stream waits for no read");
                in_flight = in_flight.max(held.len());
                for r in held {
                    largest = largest.max(r.nblocks());
                    fill(&file, r);
                }
            }
        }
    }
    assert_eq!(pages, n);
    (in_flight, largest)
}

#[test]
fn engine_hints_set_read_size_and_reads_in_flight_only_when_the_caller_does_not() {
    let hinted = Holding::with_hints(
        EngineHints::new()
            .with_read_bytes(8 * 512 + 100)
            .with_reads_in_flight(3),
    );
    // Nothing set: the engine's 8 blocks (rounded down) and 3 reads.
    assert_eq!(read_shape(&hinted, |b| b), (3, 8));
    // Both set: the caller's.
    assert_eq!(
        read_shape(&hinted, |b| b.io_combine_limit(4).max_ios(2)),
        (2, 4)
    );
    // One set: the caller's for it, the engine's for the other.
    assert_eq!(read_shape(&hinted, |b| b.io_combine_limit(5)), (3, 5));
    assert_eq!(read_shape(&hinted, |b| b.max_ios(1)), (1, 8));
    // No hints: 16 blocks, 16 reads.
    assert_eq!(read_shape(&Holding::default(), |b| b), (16, 16));
    // Hints past the limits are clamped to them, not refused: reads of up
    // to MAX_IO_COMBINE_LIMIT blocks (the pool, 4096 frames, allows one of
    // all 2048), and MAX_IOS reads of one block.
    let huge = Holding::with_hints(
        EngineHints::new()
            .with_read_bytes(1 << 30)
            .with_reads_in_flight(1),
    );
    const { assert!(2048 <= MAX_IO_COMBINE_LIMIT) };
    assert_eq!(read_shape(&huge, |b| b.full(true)), (1, 2048));
    let many = Holding::with_hints(
        EngineHints::new()
            .with_read_bytes(512)
            .with_reads_in_flight(MAX_IOS * 10),
    );
    assert_eq!(read_shape(&many, |b| b), (MAX_IOS, 1));
    // A caller's value past the limit is still an error.
    let mem = MemEngine::new();
    let file = mem.create_stamped(4, 512);
    let pool = BufferPool::new(16, 512).unwrap();
    let e = ReadStream::builder(&pool, huge, file)
        .io_combine_limit(MAX_IO_COMBINE_LIMIT + 1)
        .build(source::forward(0..4))
        .unwrap_err();
    assert!(e.to_string().contains("io_combine_limit"), "{e}");
}

/// Scans 64 blocks in reads of 16 through `engine`, failing every read it
/// is given; returns the reads the engine saw and the errors handed out.
fn failing_scan(engine: &Holding) -> (usize, Vec<String>) {
    let mem = MemEngine::new();
    let file = mem.create_stamped(64, 512);
    let pool = BufferPool::new(256, 512).unwrap();
    let mut s = ReadStream::builder(&pool, engine.clone(), file)
        .io_combine_limit(16)
        .max_ios(4)
        .full(true)
        .build(source::forward(0..64))
        .unwrap();
    let w = noop_waker();
    let mut cx = Context::from_waker(&w);
    let (mut reads, mut errors) = (0, Vec::new());
    loop {
        match Pin::new(&mut s).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(p))) => panic!("block {} read from a failing engine", p.block()),
            Poll::Ready(Some(Err(e))) => errors.push(e.to_string()),
            Poll::Ready(None) => break,
            Poll::Pending => {
                for r in engine.take() {
                    reads += 1;
                    let gone = r.complete(Err(io::Error::other("GET bytes: 503 Slow Down")));
                    assert!(gone.is_none());
                }
            }
        }
    }
    (reads, errors)
}

#[test]
fn a_failed_read_is_retried_block_by_block_unless_the_engine_says_not_to() {
    // The default: each block of a failed 16-block read is read again on
    // its own, and each of those fails too.
    let (reads, errors) = failing_scan(&Holding::default());
    assert_eq!(errors.len(), 64);
    assert_eq!(reads, 4 + 64, "{errors:?}");
    // An engine whose reads fail as a whole: the read's error is every
    // block's, each named by its own block, and nothing is read again.
    let whole = Holding::with_hints(EngineHints::new().with_retry_blocks(false));
    let (reads, errors) = failing_scan(&whole);
    assert_eq!(reads, 4, "{errors:?}");
    assert_eq!(errors.len(), 64);
    for (b, e) in errors.iter().enumerate() {
        assert_eq!(e, &format!("reading block {b}: GET bytes: 503 Slow Down"));
    }
}
