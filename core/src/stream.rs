//! [`ReadStream`]: the planner, the pool and an engine, as a
//! `futures::Stream` of [`PageGuard`]s.

use crate::engine::{EngineFile, IoEngine, ReadRequest};
use crate::error::{BuildError, ReadError};
use crate::guard::PageGuard;
use crate::plan::{AdvicePolicy, Entry, Env, Head, PlanConfig, Planner, Slot, NO_FRAME};
use crate::pool::{BufferPool, FileView, Lookup, PoolInner, Ring, RingSize, Status};
use crate::source::BlockSource;
use crate::stats::StreamStats;
use crate::sync::{lock, Arc, AtomicU8, AtomicWaker, Mutex, Ordering};
use crate::BlockNumber;
use futures::Stream;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Largest `io_combine_limit`: 32 MiB reads at 8 KiB blocks, for object
/// storage, whose requests are cheapest at 8–16 MiB (PostgreSQL 18 stops at
/// 128 blocks, 1 MiB, for local devices). A read into frames scattered over
/// more than [`MAX_BUFFERS`](crate::MAX_BUFFERS) runs is done in parts.
pub const MAX_IO_COMBINE_LIMIT: usize = 4096;
/// Largest `max_ios` (PostgreSQL's `effective_io_concurrency` maximum).
pub const MAX_IOS: usize = 1000;

/// `io_combine_limit` when neither the caller nor the engine chooses one
/// (PostgreSQL's default: 128 KiB at 8 KiB blocks).
const DEFAULT_COMBINE: usize = 16;
/// `max_ios` when neither the caller nor the engine chooses one.
const DEFAULT_MAX_IOS: usize = 16;

/// A descending scan's read-ahead window when the caller does not choose
/// one ([`StreamBuilder::backward_readahead`]): what the stream keeps in
/// flight by default (16 reads of 128 KiB). A window as large as the
/// kernel's read-ahead can be (`read_ahead_kb` of 8 MiB) made scans of
/// single blocks about a tenth faster and scans of 128 KiB reads about a
/// tenth slower than this one.
pub const DEFAULT_BACKWARD_READAHEAD: u64 = 2 << 20;

/// How long a stream may go on handing out items without giving its task
/// back to the runtime; see [`StreamBuilder::yield_budget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum YieldBudget {
    /// After this many items in a row without a `Pending` (at least 1), the
    /// next poll wakes the task and returns `Pending` once.
    Items(usize),
    /// After handing out items for this long without a `Pending` (more than
    /// zero), counted from the first poll after the last `Pending`, the next
    /// poll wakes the task and returns `Pending` once. The clock is read at
    /// that first poll and then once every [`YieldBudget::CHECK_EVERY`]
    /// items, so a yield comes at most that many items after the time is
    /// up.
    Time(Duration),
    /// Never yield for the budget: only a wait for I/O returns `Pending`.
    Unlimited,
    /// The default: a [`Time`](YieldBudget::Time) budget chosen at the
    /// stream's first poll by what a yield costs where it runs:
    /// [`YieldBudget::AUTO_TIME_MULTI_THREAD`] (1 ms) when polled on a
    /// thread of tokio's multi-thread runtime (with the `tokio` feature),
    /// where each yield also unparks an idle worker, and a yield every
    /// 200 µs cost a warm scan on two workers about 15% of its speed;
    /// [`YieldBudget::AUTO_TIME`] (200 µs) everywhere else (a
    /// current-thread runtime, where a yield costs about 100 ns, other
    /// executors, or without the `tokio` feature).
    /// [`ReadStream::yield_budget`] tells which was chosen.
    Auto,
}

impl YieldBudget {
    /// The default, [`Auto`](YieldBudget::Auto): the tasks beside the
    /// stream wait at most about 200 µs (1 ms on tokio's multi-thread
    /// runtime), and 16 items, of the stream's and its consumer's work. The
    /// usual rule for async code is 10–100 µs between yields; a yield costs
    /// more than the rule assumes (the reasons and figures are in the
    /// [`design`](crate::design) notes, §4).
    pub const DEFAULT: YieldBudget = YieldBudget::Auto;

    /// [`Auto`](YieldBudget::Auto)'s time where a yield is cheap.
    pub const AUTO_TIME: Duration = Duration::from_micros(200);

    /// [`Auto`](YieldBudget::Auto)'s time on tokio's multi-thread runtime.
    pub const AUTO_TIME_MULTI_THREAD: Duration = Duration::from_millis(1);

    /// [`Auto`](YieldBudget::Auto)'s time for a stream polled here: on a
    /// tokio multi-thread runtime's thread (with the `tokio` feature)
    /// [`AUTO_TIME_MULTI_THREAD`](Self::AUTO_TIME_MULTI_THREAD), else
    /// [`AUTO_TIME`](Self::AUTO_TIME).
    fn auto_time() -> Duration {
        #[cfg(feature = "tokio")]
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
                return Self::AUTO_TIME_MULTI_THREAD;
            }
        }
        Self::AUTO_TIME
    }

    /// How many items a [`Time`](YieldBudget::Time) budget hands out
    /// between two looks at the clock.
    pub const CHECK_EVERY: usize = 16;
}

impl Default for YieldBudget {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A finished read: its slot, `Ok(served_from_cache) | Err`, and its frame
/// list (emptied) to reuse for a later read.
type Done = (u32, Result<bool, io::Error>, Vec<u32>);

/// What a stream shares with its reads in flight and its guards: the pool,
/// and the mailbox where finished reads report.
pub(crate) struct StreamShared {
    pub(crate) pool: Arc<PoolInner>,
    /// The task polling the stream.
    waker: AtomicWaker,
    /// Finished reads (see [`Done`]).
    done: Mutex<Vec<Done>>,
    /// `done` is non-empty (checked before taking the lock).
    has_done: AtomicU8,
    /// The file's partial last block when the stream reads it as a short
    /// page ([`StreamBuilder::short_last_page`]), else `BlockNumber::MAX`
    /// (no block has that number: a block's bytes start before
    /// `u64::MAX`). A read that ends exactly `short_len` bytes into it has
    /// reached the end of the file and is complete.
    pub(crate) short_block: BlockNumber,
    /// Bytes of `short_block` (`1..block_size`; 0 without one).
    pub(crate) short_len: usize,
}

impl StreamShared {
    /// Called by a request when it ends, from whatever thread completes it.
    pub(crate) fn read_finished(&self, slot: u32, result: io::Result<bool>, frames: Vec<u32>) {
        {
            let mut done = lock(&self.done);
            done.push((slot, result, frames));
            // Set under the lock, so `take_done` never clears it while an
            // entry it has not taken is in the list.
            self.has_done.store(1, Ordering::Release);
        }
        self.waker.wake();
    }

    /// Moves the finished reads into `into`; returns whether there were
    /// any. With none (every page of a cached scan) it is one load.
    #[inline]
    fn take_done(&self, into: &mut Vec<Done>) -> bool {
        if self.has_done.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.take_done_locked(into)
    }

    #[inline(never)]
    fn take_done_locked(&self, into: &mut Vec<Done>) -> bool {
        let mut d = lock(&self.done);
        self.has_done.store(0, Ordering::Relaxed);
        into.append(&mut d);
        !into.is_empty()
    }
}

impl fmt::Debug for StreamShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamShared").finish_non_exhaustive()
    }
}

/// Builds a [`ReadStream`] over source type `S`: made by
/// [`StreamBuilder::new`] or [`ReadStream::builder`], configured with the
/// setters below, finished by [`build`](Self::build), which fixes `S`.
///
/// Every setter has a default (PostgreSQL's where it has one): 16 reads in
/// flight and 16 blocks per read (or what the engine asks for, see
/// [`EngineHints::read_bytes`](crate::EngineHints::read_bytes)), no ring, [`AdvicePolicy::Auto`], backward
/// combining and the fast path on.
///
/// ```
/// use pagestream::{source, testing::MemEngine, BufferPool, RingSize, StreamBuilder};
///
/// let engine = MemEngine::new();
/// let file = engine.create_stamped(100, 8192);
/// let pool = BufferPool::new(64, 8192)?;
/// let stream = StreamBuilder::new(&pool, engine, file)
///     .max_ios(4)                         // effective_io_concurrency
///     .io_combine_limit(8)                // 64 KiB reads
///     .ring(Some(RingSize::BULKREAD))     // recycle a bounded set of frames
///     .build(source::backward(0..100))?;  // newest block first
/// assert_eq!(stream.stats().pages, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub struct StreamBuilder<E: IoEngine, S> {
    source: PhantomData<fn() -> S>,
    pool: BufferPool,
    engine: E,
    file: E::File,
    max_ios: Option<usize>,
    combine: Option<usize>,
    ring: Option<RingSize>,
    advice: AdvicePolicy,
    backward_combining: bool,
    backward_readahead: u64,
    gap_limit: usize,
    fast_path: bool,
    full: bool,
    prefetch: bool,
    short_last_page: bool,
    yield_budget: YieldBudget,
}

impl<E: IoEngine, S> fmt::Debug for StreamBuilder<E, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamBuilder")
            .field("engine", &self.engine.name())
            .field("max_ios", &self.max_ios)
            .field("io_combine_limit", &self.combine)
            .field("ring", &self.ring)
            .field("advice", &self.advice)
            .field("backward_combining", &self.backward_combining)
            .field("backward_readahead", &self.backward_readahead)
            .field("gap_limit", &self.gap_limit)
            .field("fast_path", &self.fast_path)
            .field("full", &self.full)
            .field("short_last_page", &self.short_last_page)
            .field("yield_budget", &self.yield_budget)
            .finish_non_exhaustive()
    }
}

impl<E: IoEngine, S> StreamBuilder<E, S> {
    /// Starts building a stream of `file`'s pages through `engine` into
    /// `pool` (a handle to the same pool: it is shared, not copied); finish
    /// with [`build`](Self::build). [`ReadStream::builder`] is the same.
    pub fn new(pool: &BufferPool, engine: E, file: E::File) -> Self {
        StreamBuilder {
            source: PhantomData,
            pool: pool.clone(),
            engine,
            file,
            max_ios: None,
            combine: None,
            ring: None,
            advice: AdvicePolicy::Auto,
            backward_combining: true,
            backward_readahead: DEFAULT_BACKWARD_READAHEAD,
            gap_limit: 0,
            fast_path: true,
            full: false,
            prefetch: true,
            short_last_page: false,
            yield_budget: YieldBudget::DEFAULT,
        }
    }

    /// Reads in flight at most (PostgreSQL's `effective_io_concurrency`).
    /// 0 means one read at a time and no advice. Default 16, or the
    /// engine's [`reads_in_flight`](crate::EngineHints::reads_in_flight).
    pub fn max_ios(mut self, n: usize) -> Self {
        self.max_ios = Some(n);
        self
    }

    /// Blocks per read at most (PostgreSQL's `io_combine_limit`), 1 to
    /// [`MAX_IO_COMBINE_LIMIT`]. Default 16 (128 KiB at 8 KiB blocks), or
    /// the engine's [`read_bytes`](crate::EngineHints::read_bytes) in
    /// blocks.
    pub fn io_combine_limit(mut self, n: usize) -> Self {
        self.combine = Some(n);
        self
    }

    /// Recycle a bounded ring of frames (PostgreSQL's BULKREAD strategy) so
    /// this scan cannot flush the pool. Default: no ring.
    pub fn ring(mut self, ring: Option<RingSize>) -> Self {
        self.ring = ring;
        self
    }

    /// When to give read-ahead advice. Default [`AdvicePolicy::Auto`].
    pub fn advice(mut self, policy: AdvicePolicy) -> Self {
        self.advice = policy;
        self
    }

    /// Combine descending runs into one read (default on).
    pub fn backward_combining(mut self, on: bool) -> Self {
        self.backward_combining = on;
        self
    }

    /// A descending scan's own read-ahead, `bytes` of it (rounded down to
    /// whole blocks; 0 turns it off; default
    /// [`DEFAULT_BACKWARD_READAHEAD`]). The kernel reads ahead only above
    /// an ascending reader; once three of this stream's reads in a row go
    /// down a buffered file, each right below the one before, it advises
    /// the window of `bytes` below them, and the next window when a read
    /// reaches the lower half of the last, so the kernel reads a window
    /// ahead of the scan in large requests. Only with an engine that takes
    /// advice ([`EngineHints::advice`](crate::EngineHints::advice)) and
    /// `max_ios` above 0, on a file the kernel reads ahead for, not under
    /// [`AdvicePolicy::Never`], and for a window larger than two reads;
    /// [`StreamStats::backward_readahead`](crate::StreamStats::backward_readahead)
    /// counts the windows. The advice is given on the thread that polls the
    /// stream, after the read that triggers it has started (the thread-pool
    /// engine's is a `posix_fadvise`, which may wait briefly to allocate the
    /// window's pages and queue its I/O).
    pub fn backward_readahead(mut self, bytes: u64) -> Self {
        self.backward_readahead = bytes;
        self
    }

    /// Read through gaps of up to `blocks` unwanted blocks between two
    /// blocks of an ascending run of the source (a bitmap scan's dense
    /// stretches), when every block of the gap is a miss and the read stays
    /// within `io_combine_limit`: one larger read instead of two, for
    /// storage where a request costs more than the bytes of a small hole
    /// (a device limited in operations per second, a remote store). The
    /// gaps' pages are not handed out; they are left in the pool as cached
    /// pages (the first to be evicted), and [`StreamStats::gap_blocks`](crate::StreamStats::gap_blocks)
    /// counts them. Default 0 (off): on a local SSD, bandwidth runs out
    /// before requests do, and buffered reads get their holes from the
    /// kernel's read-ahead anyway (see `docs/engines.md`).
    pub fn gap_limit(mut self, blocks: usize) -> Self {
        self.gap_limit = blocks;
        self
    }

    /// Use the fast path for fully cached scans (default on).
    pub fn fast_path(mut self, on: bool) -> Self {
        self.fast_path = on;
        self
    }

    /// When a page is handed out, ask the CPU to fetch the next queued page's
    /// first cache lines and its last one (a heap page's header, line
    /// pointers and first tuple) while the consumer works on this one. A
    /// no-op where the platform has no prefetch hint. Default on: it pays
    /// when the pages come from memory rather than the CPU's caches (a
    /// pool larger than the caches, a consumer that reads a page's first
    /// and last lines); a hot set that fits the caches, or another machine,
    /// may gain nothing or pay a little. Figures and the commands to
    /// measure it: `docs/engines.md`, "Prefetch on by default".
    pub fn prefetch(mut self, on: bool) -> Self {
        self.prefetch = on;
        self
    }

    /// The caller will read everything the source names: skip the distance
    /// ramp and start at full-sized reads (PostgreSQL's `READ_STREAM_FULL`,
    /// used by prewarm).
    pub fn full(mut self, on: bool) -> Self {
        self.full = on;
        self
    }

    /// What to do with a file whose length is not a multiple of the block
    /// size. Default `false`: building the stream fails with
    /// [`BuildError::PartialBlock`], naming the file, its length and the
    /// block size, so that no tail of a file goes unread unnoticed. `true`:
    /// the partial last block is one more block of the file, handed out as
    /// a short page (its guard's `len()` is the tail's length; the frame's
    /// bytes past it are zero and not part of the page).
    ///
    /// ```
    /// use futures::{executor::block_on, StreamExt};
    /// use pagestream::{source, testing::MemEngine, BufferPool, BuildError, ReadStream};
    ///
    /// let engine = MemEngine::new();
    /// let file = engine.create(vec![7u8; 12345]);
    /// let pool = BufferPool::new(16, 8192)?;
    /// let err = ReadStream::builder(&pool, engine.clone(), file.clone())
    ///     .build(source::forward(0..2))
    ///     .unwrap_err();
    /// assert!(matches!(err, BuildError::PartialBlock { file_len: 12345, tail: 4153, .. }));
    ///
    /// let mut stream = ReadStream::builder(&pool, engine, file)
    ///     .short_last_page(true)
    ///     .build(source::forward(0..2))?;
    /// let lens = block_on(async {
    ///     let mut lens = Vec::new();
    ///     while let Some(page) = stream.next().await {
    ///         lens.push(page?.len());
    ///     }
    ///     Ok::<_, std::io::Error>(lens)
    /// })?;
    /// assert_eq!(lens, [8192, 4153]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn short_last_page(mut self, on: bool) -> Self {
        self.short_last_page = on;
        self
    }

    /// How long the stream hands out items in a row before it yields to the
    /// runtime. Default [`YieldBudget::DEFAULT`]: 200 µs, 1 ms on tokio's
    /// multi-thread runtime ([`YieldBudget::Auto`]).
    ///
    /// A stream whose pages are in the pool (or whose engine completes reads
    /// inline) is always ready, so a consumer looping on `next().await`
    /// would never give its thread back, and every task beside it — timers,
    /// I/O, a `timeout` around the scan — would wait for the whole scan.
    /// Once the budget is spent — `n` items in a row without a `Pending`
    /// ([`YieldBudget::Items`]), or items handed out for a given time
    /// without one ([`YieldBudget::Time`]; the time the consumer spends
    /// between polls counts) — the next poll wakes the task and returns
    /// `Pending` once, on any runtime or executor; the poll after that goes
    /// on where the stream was. The budget starts again at every `Pending`
    /// (a wait for I/O gives the thread back anyway) and runs on across
    /// [`ReadStream::reset`]; every item counts, pages, errors and the end
    /// alike, from the fast path as from the queue. A yield for the budget
    /// is not a wait: it leaves [`StreamStats::waits`] and the look-ahead
    /// distance alone and counts in [`StreamStats::budget_yields`].
    ///
    /// With the crate's `tokio` feature, on a tokio runtime the stream also
    /// takes part in tokio's own per-task budget
    /// (`tokio::task::coop::poll_proceed`: every
    /// [`YieldBudget::CHECK_EVERY`] items spend one unit, about one 128 KiB
    /// read's worth of 8 KiB pages, and when the task's budget is spent the
    /// stream returns `Pending` until the task is polled again), and it
    /// yields as `tokio::task::yield_now` does, after the scheduler has run
    /// the other ready tasks and polled its timers and I/O.
    /// [`YieldBudget::Unlimited`] turns off the stream's own budget only;
    /// `tokio::task::coop::unconstrained` turns off tokio's.
    ///
    /// `YieldBudget::Items(0)` and `YieldBudget::Time(Duration::ZERO)` are a
    /// [`BuildError::Zero`].
    ///
    /// [`StreamStats::waits`]: crate::StreamStats::waits
    /// [`StreamStats::budget_yields`]: crate::StreamStats::budget_yields
    pub fn yield_budget(mut self, budget: YieldBudget) -> Self {
        self.yield_budget = budget;
        self
    }

    /// Validates the configuration, asks the file's length and builds the
    /// stream over `source`.
    pub fn build(self, source: S) -> Result<ReadStream<E, S>, BuildError>
    where
        S: BlockSource,
    {
        let hints = self.engine.hints(&self.file);
        let block_size = self.pool.inner.block_size;
        let combine = self.combine.unwrap_or_else(|| match hints.read_bytes {
            Some(bytes) => (bytes / block_size).clamp(1, MAX_IO_COMBINE_LIMIT),
            None => DEFAULT_COMBINE,
        });
        let max_ios = self.max_ios.unwrap_or_else(|| {
            hints
                .reads_in_flight
                .map_or(DEFAULT_MAX_IOS, |n| n.min(MAX_IOS))
        });
        if combine == 0 {
            return Err(BuildError::Zero {
                what: "io_combine_limit",
            });
        }
        if combine > MAX_IO_COMBINE_LIMIT {
            return Err(BuildError::TooLarge {
                what: "io_combine_limit",
                value: combine,
                max: MAX_IO_COMBINE_LIMIT,
            });
        }
        if max_ios > MAX_IOS {
            return Err(BuildError::TooLarge {
                what: "max_ios",
                value: max_ios,
                max: MAX_IOS,
            });
        }
        let yield_every = match self.yield_budget {
            YieldBudget::Items(0) | YieldBudget::Time(Duration::ZERO) => {
                return Err(BuildError::Zero {
                    what: "yield budget",
                })
            }
            YieldBudget::Items(n) => n as u64,
            // `Auto`'s time is chosen at the first poll.
            YieldBudget::Time(_) | YieldBudget::Auto => YieldBudget::CHECK_EVERY as u64,
            YieldBudget::Unlimited => u64::MAX,
        };
        let yield_budget = self.yield_budget;
        let pool = self.pool.inner;
        let ring = match self.ring {
            None => None,
            Some(RingSize::Frames(0)) | Some(RingSize::Bytes(0)) => {
                return Err(BuildError::Zero { what: "ring size" })
            }
            Some(r) => Some(Ring::for_stream(
                r,
                pool.block_size,
                max_ios,
                combine,
                pool.nframes,
            )),
        };
        let count = self
            .file
            .block_count(pool.block_size)
            .map_err(|source| BuildError::File { source })?;
        let file_len = count.full * pool.block_size as u64 + count.tail as u64;
        if count.tail != 0 && !self.short_last_page {
            let file = match self.file.path() {
                Some(p) => p.display().to_string(),
                None => self.file.id().to_string(),
            };
            return Err(BuildError::PartialBlock {
                file,
                file_len,
                block_size: pool.block_size,
                tail: count.tail,
            });
        }
        let segment_blocks = match self.file.segment_bytes() {
            None => 0,
            Some(bytes) if bytes == 0 || bytes % pool.block_size as u64 != 0 => {
                return Err(BuildError::SegmentSize {
                    segment_bytes: bytes,
                    block_size: pool.block_size,
                })
            }
            Some(bytes) => bytes / pool.block_size as u64,
        };
        let budget = (max_ios + 1) * combine;
        let cfg = PlanConfig {
            max_ios: max_ios.max(1),
            combine,
            budget,
            advice: self.advice,
            advice_possible: max_ios > 0 && hints.advice,
            kernel_readahead: self.file.kernel_readahead(),
            backward_combining: self.backward_combining,
            fast_path: self.fast_path,
            full: self.full,
            full_look_ahead: hints.full_look_ahead,
            cached_depth: hints.cached_reads.reads(),
            retry_blocks: hints.retry_blocks,
            segment_blocks,
            backward_readahead: self.backward_readahead / pool.block_size as u64,
            gap_limit: self.gap_limit,
        };
        // This stream's claim on the pool: its whole pin budget (at most the
        // pool), registered once. Look-ahead may use what the other streams
        // have not claimed, and never less than a fair share.
        let demand = budget.min(pool.nframes);
        pool.stream_started(demand);
        let file_view = pool.file_view(self.file.id());
        // Only a short last page the caller asked for reaches here.
        let (short_block, short_len) = if count.tail != 0 {
            (count.full, count.tail)
        } else {
            (BlockNumber::MAX, 0)
        };
        Ok(ReadStream {
            file_view,
            file_len,
            nblocks: count.blocks(),
            shared: Arc::new(StreamShared {
                pool,
                waker: AtomicWaker::new(),
                done: Mutex::new(Vec::new()),
                has_done: AtomicU8::new(0),
                short_block,
                short_len,
            }),
            engine: self.engine,
            file: self.file,
            helps: hints.help,
            source,
            ring,
            claim: demand,
            demand,
            planner: Planner::new(cfg),
            wait_started: None,
            done_scratch: Vec::new(),
            prefetch: self.prefetch,
            yield_every,
            yield_left: yield_every,
            yield_budget,
            run_started: None,
            #[cfg(feature = "tokio")]
            tokio_left: 0,
            exhausted_turns: 0,
            waker_in_mailbox: false,
        })
    }
}

/// A stream of the pages of one file, in the order a [`BlockSource`] names
/// them, read ahead, combined and kept in flight by the planner (see the
/// [crate docs](crate)), as pinned [`PageGuard`]s from a shared
/// [`BufferPool`].
///
/// Items are `io::Result<PageGuard<D>>`; an error names its block (see
/// [`ReadError`]) and the stream goes on after it. Dropping the stream at any
/// point releases every pin it holds; reads in flight finish on their own.
///
/// ```
/// use futures::{executor::block_on, StreamExt};
/// use pagestream::{source, testing::MemEngine, BufferPool, ReadStream};
///
/// let pool = BufferPool::new(64, 8192)?;
/// let engine = MemEngine::new();
/// let file = engine.create_stamped(100, 8192);
/// let mut stream = ReadStream::builder(&pool, engine, file).build(source::forward(0..100))?;
/// block_on(async {
///     let mut n = 0;
///     while let Some(page) = stream.next().await {
///         let page = page?;
///         assert_eq!(page.block(), n);
///         n += 1;
///     }
///     assert_eq!(n, 100);
///     Ok::<_, std::io::Error>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ReadStream<E: IoEngine, S: BlockSource> {
    shared: Arc<StreamShared>,
    engine: E,
    file: E::File,
    /// The engine may do queued reads on this thread
    /// ([`EngineHints::help`](crate::EngineHints::help)).
    helps: bool,
    /// This stream's cached view of the file's block table.
    file_view: FileView,
    file_len: u64,
    nblocks: u64,
    source: S,
    ring: Option<Ring>,
    /// This stream's claim on the pool's frames, added to the pool's
    /// `reserved` while the stream lives: its pin budget (at most the pool)
    /// while it reads blocks itself, none while it only follows other
    /// streams' reads (see [`Env::frames_available`]).
    claim: usize,
    /// The claim of a reading stream: its pin budget, at most the pool.
    demand: usize,
    planner: Planner<S::Data>,
    /// When the consumer started waiting, while it waits.
    wait_started: Option<Instant>,
    done_scratch: Vec<Done>,
    /// Prefetch the next page's memory when handing one out.
    prefetch: bool,
    /// The yield budget: items in a row between two yields, or with a time
    /// budget between two looks at the clock (`u64::MAX`: unlimited, never
    /// reached).
    yield_every: u64,
    /// Items the stream may still hand out before it yields (or looks at
    /// the clock).
    yield_left: u64,
    /// The budget in force: the one built with, until the first poll
    /// chooses [`YieldBudget::Auto`]'s time.
    yield_budget: YieldBudget,
    /// When the current run of items without a `Pending` began, for a time
    /// budget (`None` between a `Pending` and the next poll).
    run_started: Option<Instant>,
    /// Items before the next unit of tokio's budget is spent.
    #[cfg(feature = "tokio")]
    tokio_left: u32,
    /// Turns given to the runtime in a row because no frame could be had
    /// (see [`EXHAUSTED_TURNS`]).
    exhausted_turns: u32,
    /// The task's waker is in the mailbox (`StreamShared::waker`): left by
    /// the last poll that waited for a read. The next poll takes it out, so
    /// that reads finishing while the stream runs (its own help, another
    /// thread) do not wake a task that is already running: tokio would poll
    /// it again at once, as a yield, and wake another worker to steal it.
    waker_in_mailbox: bool,
}

/// How many times in a row a stream that finds every frame pinned, with
/// nothing of its own in flight, yields to the runtime before it reports
/// [`ReadError::PoolExhausted`], while other streams share the pool. Their
/// look-ahead pins come back as they run (a stream paused by its yield
/// budget, a follower of a synchronized scan holding the pages it has not
/// taken yet); a task that holds every frame itself gets the error after
/// these turns, never a hang.
const EXHAUSTED_TURNS: u32 = 64;

// Nothing in a ReadStream relies on its address staying put.
impl<E: IoEngine, S: BlockSource> Unpin for ReadStream<E, S> {}

impl<E: IoEngine, S: BlockSource> fmt::Debug for ReadStream<E, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadStream")
            .field("engine", &self.engine.name())
            .field("file_len", &self.file_len)
            .field("distance", &self.planner.distance())
            .field("pinned", &self.planner.pinned())
            .field("ios_in_progress", &self.planner.ios_in_progress())
            .finish_non_exhaustive()
    }
}

impl<E: IoEngine, S: BlockSource> ReadStream<E, S> {
    /// Starts building a stream of `file`'s pages through `engine` into
    /// `pool`; finish with [`StreamBuilder::build`], whose source fixes `S`.
    /// The same as [`StreamBuilder::new`].
    pub fn builder(pool: &BufferPool, engine: E, file: E::File) -> StreamBuilder<E, S> {
        StreamBuilder::new(pool, engine, file)
    }
}

/// The planner's view of the world, borrowed from the stream's fields.
struct StreamEnv<'a, E: IoEngine, S> {
    shared: &'a Arc<StreamShared>,
    engine: &'a E,
    file: &'a E::File,
    file_view: &'a mut FileView,
    file_len: u64,
    nblocks: u64,
    source: &'a mut S,
    ring: &'a mut Option<Ring>,
    claim: &'a mut usize,
    demand: usize,
}

impl<E: IoEngine, S: BlockSource> Env<S::Data> for StreamEnv<'_, E, S> {
    #[inline]
    fn next_block(&mut self) -> Option<(BlockNumber, S::Data)> {
        self.source.next_block()
    }

    #[inline]
    fn check_block(&self, block: BlockNumber) -> Result<(), ReadError> {
        // Planted bug (the review's): let a block past the end through to
        // the engine.
        if block < self.nblocks || cfg!(pagestream_mutant = "past_end") {
            Ok(())
        } else {
            let block_size = self.shared.pool.block_size;
            Err(ReadError::PastEnd {
                block,
                file_len: self.file_len,
                file_blocks: self.nblocks,
                block_size,
            })
        }
    }

    #[inline]
    fn lookup(&mut self, block: BlockNumber) -> Result<Lookup, ()> {
        self.shared
            .pool
            .lookup(self.file_view, block, self.ring.as_mut())
            .map_err(|_| ())
    }

    fn resident(&mut self, block: BlockNumber) -> bool {
        self.shared.pool.resident(self.file_view, block)
    }

    fn ring_window(&mut self, frames: usize) {
        if let Some(ring) = self.ring.as_mut() {
            ring.set_window(frames);
        }
    }

    fn frame_status(&self, frame: u32) -> Status {
        self.shared.pool.status(frame)
    }

    fn claim_io(&mut self, frame: u32) -> Lookup {
        self.shared.pool.classify_pinned(frame)
    }

    fn unpin(&mut self, frame: u32) {
        self.shared.pool.unpin(frame);
    }

    fn start_read(
        &mut self,
        slot: u32,
        first: BlockNumber,
        frames: Vec<u32>,
        gaps: &[u32],
        descending: bool,
        advise: bool,
    ) {
        let n = frames.len() as u64;
        // The request owns the frames (in IO) before engine code runs: if
        // `advise` or `start_read` panics, dropping it ends the read as
        // cancelled, so no frame is left in IO with no read to end it.
        let mut req = ReadRequest::new(Arc::clone(self.shared), slot, first, frames, descending);
        // No entry holds the gaps' frames: their claim pins go now, before
        // engine code runs (frame rule 3: a frame in IO, pinned or not, is
        // never taken for another block; the request ends its IO).
        for &f in gaps {
            self.shared.pool.unpin(f);
        }
        if advise {
            req.set_advised(self.advise(first, n));
        }
        self.engine.start_read(self.file, req);
    }

    fn abandon(&mut self, frame: u32) {
        let pool = &self.shared.pool;
        pool.finish_io(frame, false);
        pool.unpin(frame);
    }

    fn advise(&mut self, first: BlockNumber, n: u64) -> bool {
        let bs = self.shared.pool.block_size as u64;
        self.engine.advise(self.file, first * bs, n * bs)
    }

    fn frames_available(&mut self, reader: bool) -> usize {
        let want = if reader { self.demand } else { 0 };
        if want != *self.claim {
            self.shared.pool.change_claim(*self.claim, want);
            *self.claim = want;
        }
        if reader {
            self.shared.pool.available_for(want)
        } else {
            // A follower pins frames other streams read or cached: none
            // it takes from the pool. It may look ahead as far as its own
            // budget, holding the reader's pages until it has taken them.
            self.demand
        }
    }
}

impl<E: IoEngine, S: BlockSource> ReadStream<E, S> {
    fn split(&mut self) -> (&mut Planner<S::Data>, StreamEnv<'_, E, S>) {
        (
            &mut self.planner,
            StreamEnv {
                shared: &self.shared,
                engine: &self.engine,
                file: &self.file,
                file_view: &mut self.file_view,
                file_len: self.file_len,
                nblocks: self.nblocks,
                source: &mut self.source,
                ring: &mut self.ring,
                claim: &mut self.claim,
                demand: self.demand,
            },
        )
    }

    /// This stream's counters so far.
    pub fn stats(&self) -> StreamStats {
        self.planner.stats.clone()
    }

    /// The current look-ahead distance.
    pub fn distance(&self) -> usize {
        self.planner.distance()
    }

    /// How many frames this stream's ring holds now (it grows when
    /// look-ahead is deeper than the ring asked for), if it has one.
    pub fn ring_len(&self) -> Option<usize> {
        self.ring.as_ref().map(Ring::len)
    }

    /// The yield budget in force (see [`StreamBuilder::yield_budget`]):
    /// the one built with, except that [`YieldBudget::Auto`] becomes the
    /// [`YieldBudget::Time`] it chose at the stream's first poll.
    pub fn yield_budget(&self) -> YieldBudget {
        self.yield_budget
    }

    /// This stream's reads in flight right now.
    pub fn reads_in_flight(&self) -> usize {
        self.planner.ios_in_progress()
    }

    /// The file's length in bytes, as asked when the stream was built.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// Drops all look-ahead (releasing its pins) and continues from
    /// `source`, with the distance back at its start. Reads in flight finish
    /// on their own and their pages stay in the pool.
    ///
    /// If dropping the old look-ahead's data (or the old source) panics,
    /// the panic comes out of `reset`, and the stream, already on `source`,
    /// goes on correctly when polled again.
    pub fn reset(&mut self, source: S) {
        // The new source first: the planner's reset ends by dropping user
        // data, and the old source is dropped last, both of which may panic.
        let old = std::mem::replace(&mut self.source, source);
        let released = Released(Arc::clone(&self.shared.pool));
        let (planner, mut env) = self.split();
        planner.reset(&mut env);
        drop(released);
        drop(old);
    }

    /// Releases all look-ahead and waits until every read this stream
    /// started has finished, then returns its stats. Dropping the stream
    /// instead does not wait (its reads still finish on their own).
    pub async fn close(mut self) -> StreamStats {
        {
            let _released = Released(Arc::clone(&self.shared.pool));
            let (planner, mut env) = self.split();
            planner.reset(&mut env);
        }
        futures::future::poll_fn(|cx| {
            self.drain_done();
            // Reads the engine has queued but not started are done here.
            while self.planner.ios_in_progress() > 0 && self.helps && self.engine.help(&self.file) {
                self.drain_done();
            }
            if self.planner.ios_in_progress() == 0 {
                return Poll::Ready(());
            }
            self.shared.waker.register(cx.waker());
            self.drain_done();
            if self.planner.ios_in_progress() == 0 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        self.stats()
    }

    /// Hands finished reads to the planner; returns whether there were any.
    fn drain_done(&mut self) -> bool {
        if !self.shared.take_done(&mut self.done_scratch) {
            return false;
        }
        let mut done = std::mem::take(&mut self.done_scratch);
        for (slot, result, frames) in done.drain(..) {
            self.planner.read_done(slot, result);
            self.planner.recycle(frames);
        }
        self.done_scratch = done;
        true
    }

    fn hand_out(&mut self, e: Entry<S::Data>) -> io::Result<PageGuard<S::Data>> {
        if self.prefetch {
            if let Some(f) = self.planner.next_ready_frame() {
                prefetch_page(self.shared.pool.frame_ptr(f), self.shared.pool.block_size);
            }
        }
        if let Some(t) = self.wait_started.take() {
            let st = &mut self.planner.stats;
            st.waits += 1;
            st.wait_time += t.elapsed();
        }
        match e.slot {
            Slot::Ready => Ok(PageGuard::new(
                Arc::clone(&self.shared),
                e.frame,
                e.block,
                e.data,
            )),
            Slot::Failed(err) => {
                if e.frame != NO_FRAME {
                    self.shared.pool.unpin(e.frame);
                }
                Err(err)
            }
            _ => unreachable!("hand_out of an entry that is not ready"),
        }
    }
}

/// Hints the CPU to fetch a page's first two cache lines and its last one.
#[inline]
fn prefetch_page(page: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for off in [0, 64, len - 64] {
            // SAFETY: `prefetch` is a hint: it never faults and has no
            // architectural effect, whatever the address. The addresses
            // are inside the pool's allocation anyway (`len >= 512`).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(page.wrapping_add(off).cast::<i8>()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (page, len);
}

impl<E: IoEngine, S: BlockSource> ReadStream<E, S> {
    /// The next item, or `Pending` while it is read; the yield budget is
    /// `poll_next`'s.
    fn poll_page(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<io::Result<PageGuard<S::Data>>>> {
        let this = self.get_mut();
        if this.waker_in_mailbox {
            // Running now: a wake-up is owed only after the next `Pending`,
            // whose path puts the waker back and then looks at the mailbox.
            this.waker_in_mailbox = false;
            drop(this.shared.waker.take());
        }
        loop {
            if this.drain_done() {
                let (planner, mut env) = this.split();
                planner.look_ahead(&mut env);
            }
            let (planner, mut env) = this.split();
            if planner.in_fast_path() {
                let e = planner.fast_pop(&mut env);
                return Poll::Ready(Some(this.hand_out(e)));
            }
            match planner.prepare_head(&mut env) {
                Head::End => return Poll::Ready(None),
                Head::Exhausted => {
                    if this.exhausted_turns < EXHAUSTED_TURNS
                        && this.shared.pool.streams.load(Ordering::Relaxed) > 1
                    {
                        this.exhausted_turns += 1;
                        yield_to_runtime(cx);
                        return Poll::Pending;
                    }
                    this.exhausted_turns = 0;
                    this.planner.stats.errors += 1;
                    let frames = this.shared.pool.nframes;
                    return Poll::Ready(Some(Err(ReadError::PoolExhausted { frames }.into())));
                }
                Head::Ready => {
                    let e = planner.pop(&mut env);
                    return Poll::Ready(Some(this.hand_out(e)));
                }
                Head::WaitRead => {
                    this.planner.note_wait();
                    // Before waiting, do a read the engine has queued (ours,
                    // most likely) on this thread.
                    if this.helps && this.engine.help(&this.file) {
                        continue;
                    }
                    if this.register_or_done(cx) {
                        continue;
                    }
                }
                Head::WaitFrame(f) => {
                    this.planner.note_wait();
                    // The read may be queued in the engine, not started.
                    if this.helps && this.engine.help(&this.file) {
                        continue;
                    }
                    if !this.shared.pool.wait_io(f, cx.waker()) {
                        continue;
                    }
                    // Our own reads may finish first and free a slot. One
                    // that finished since the mailbox was last drained woke
                    // the previous waker, not this one: look again.
                    if this.register_or_done(cx) {
                        continue;
                    }
                }
            }
            if this.wait_started.is_none() {
                this.wait_started = Some(Instant::now());
            }
            return Poll::Pending;
        }
    }
}

impl<E: IoEngine, S: BlockSource> Stream for ReadStream<E, S> {
    type Item = io::Result<PageGuard<S::Data>>;

    // `poll_page` under the yield budget (see `StreamBuilder::yield_budget`):
    // a decrement per item, a compare per poll.
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.run_started.is_none()
            && matches!(this.yield_budget, YieldBudget::Time(_) | YieldBudget::Auto)
        {
            // The first poll of a run: a time budget's clock starts now.
            if this.yield_budget == YieldBudget::Auto {
                this.yield_budget = YieldBudget::Time(YieldBudget::auto_time());
            }
            this.run_started = Some(Instant::now());
        }
        if this.yield_left == 0 {
            this.yield_left = this.yield_every;
            if this.budget_spent() {
                this.run_started = None;
                this.planner.stats.budget_yields += 1;
                yield_to_runtime(cx);
                return Poll::Pending;
            }
        }
        #[cfg(feature = "tokio")]
        let tokio_budget = if this.tokio_left == 0 {
            match tokio::task::coop::poll_proceed(cx) {
                Poll::Ready(b) => Some(b),
                Poll::Pending => {
                    // tokio has arranged the wake-up.
                    this.yield_left = this.yield_every;
                    this.run_started = None;
                    this.planner.stats.budget_yields += 1;
                    return Poll::Pending;
                }
            }
        } else {
            None
        };
        let item = Pin::new(&mut *this).poll_page(cx);
        if item.is_ready() {
            this.yield_left -= 1;
            this.exhausted_turns = 0;
            #[cfg(feature = "tokio")]
            match tokio_budget {
                Some(b) => {
                    b.made_progress();
                    this.tokio_left = YieldBudget::CHECK_EVERY as u32 - 1;
                }
                None => this.tokio_left -= 1,
            }
        } else {
            this.yield_left = this.yield_every;
            this.run_started = None;
        }
        item
    }
}

impl<E: IoEngine, S: BlockSource> ReadStream<E, S> {
    /// Puts the task's waker in the mailbox before a `Pending`, then looks
    /// at the mailbox once more: a read that finished before the waker was
    /// there woke no one. Returns whether one had; the waker is then taken
    /// back out, since the stream goes on running (see `waker_in_mailbox`).
    fn register_or_done(&mut self, cx: &Context<'_>) -> bool {
        self.shared.waker.register(cx.waker());
        if self.shared.has_done.load(Ordering::Acquire) != 0 {
            drop(self.shared.waker.take());
            return true;
        }
        self.waker_in_mailbox = true;
        false
    }

    /// Whether the yield budget is spent, now that `yield_every` items have
    /// gone without a `Pending`: with an items budget, yes; with a time
    /// budget, when the run began long enough ago.
    fn budget_spent(&self) -> bool {
        match (self.yield_budget, self.run_started) {
            (YieldBudget::Time(limit), Some(t)) => t.elapsed() >= limit,
            // Items, or a run whose clock `poll_next` had not started (it
            // starts it before any item of a run).
            _ => true,
        }
    }
}

/// Arranges for the task to be polled again, after the runtime has run the
/// others: on tokio (with the `tokio` feature) as `tokio::task::yield_now`
/// does, after the scheduler has polled its timers and I/O; elsewhere by
/// waking the task, which puts it at the back of the run queue.
#[inline(never)]
fn yield_to_runtime(cx: &mut Context<'_>) {
    #[cfg(feature = "tokio")]
    {
        use std::future::Future;
        // The first poll of `yield_now` hands the waker to the scheduler
        // (outside a runtime it wakes it) and is `Pending`; a `Pending`
        // future has arranged its wake-up, so dropping it then is fine.
        let mut y = std::pin::pin!(tokio::task::yield_now());
        if y.as_mut().poll(cx).is_pending() {
            return;
        }
    }
    cx.waker().wake_by_ref();
}

impl<E: IoEngine, S: BlockSource> Drop for ReadStream<E, S> {
    fn drop(&mut self) {
        // The pool's bookkeeping first: the reset below ends by dropping
        // user data, which may panic (it releases every pin before that).
        let pool = &self.shared.pool;
        if let Some(ring) = self.ring.as_mut() {
            pool.flush_ring_counts(ring);
        }
        pool.stream_ended(self.claim);
        lock(&pool.totals).merge(&self.planner.stats);
        let _released = Released(Arc::clone(&self.shared.pool));
        let (planner, mut env) = self.split();
        planner.reset(&mut env);
    }
}

/// Tells the pool's watchers (engines that abort reads no stream wants,
/// see [`ReadRequest::abandoned`]) that a stream has released its
/// look-ahead pins: on drop, so also when the reset that released them
/// panics in the drop of a block's data.
struct Released(Arc<PoolInner>);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.watchers.released();
    }
}
