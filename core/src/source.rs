//! Block sources: what tells a stream which block comes next.
//!
//! A [`BlockSource`] is PostgreSQL's read-stream callback. It returns the next
//! block number and optional per-block user data (`Data`), or `None` at the
//! end. The stream asks it only as far ahead as its look-ahead distance, so a
//! source may be lazy (a bitmap iterator, a shared parallel allocator).
//!
//! Provided: [`forward`], [`backward`], [`iter`] and [`with_data`]; for
//! several workers sharing one scan, [`ParallelScan`]; for scans that start
//! where a running scan of the same file is, [`SyncScans`]. Any type that
//! implements [`BlockSource`] works too.
//!
//! A bitmap heap scan: each block carries the offsets of its matching tuples
//! to its page, which the consumer reads with [`PageGuard::data`]:
//!
//! ```
//! use futures::{executor::block_on, StreamExt};
//! use pagestream::{source, testing::MemEngine, BufferPool, ReadStream};
//!
//! let engine = MemEngine::new();
//! let file = engine.create_stamped(100, 8192);
//! let pool = BufferPool::new(64, 8192)?;
//! let bitmap = vec![(3u64, vec![1u16, 7]), (4, vec![2]), (90, vec![5, 6, 9])];
//! let mut pages = ReadStream::builder(&pool, engine, file)
//!     .build(source::with_data(bitmap))?;
//! let matches = block_on(async {
//!     let mut n = 0;
//!     while let Some(page) = pages.next().await {
//!         let page = page?;
//!         n += page.data().len(); // visit only these tuples of `page`
//!     }
//!     Ok::<_, std::io::Error>(n)
//! })?;
//! assert_eq!(matches, 6);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`PageGuard::data`]: crate::PageGuard::data

use crate::{BlockNumber, FileId};
use std::ops::Range;

/// What tells a stream which block to read next.
///
/// The stream asks for blocks as it looks ahead, at most its look-ahead
/// distance ahead of the pages handed out (blocks past the end of the file,
/// which it hands out as errors, count like pages).
///
/// **The end is final.** Once `next_block` has returned `None` the stream
/// never calls it again, until [`ReadStream::reset`](crate::ReadStream::reset)
/// gives it a source to continue from; a source need not be fused, and
/// one that would name more blocks after `None` is simply not asked.
///
/// A `next_block` that panics unwinds out of the stream's `poll_next`; the
/// stream keeps every pin where dropping it releases it, and polled again it
/// goes on (the page it was handing out when the source panicked comes next).
///
/// ```
/// use pagestream::source::{self, BlockSource};
/// let mut s = source::backward(3..6);
/// assert_eq!(s.next_block(), Some((5, ())));
/// assert_eq!(s.next_block(), Some((4, ())));
/// assert_eq!(s.next_block(), Some((3, ())));
/// assert_eq!(s.next_block(), None);
/// ```
pub trait BlockSource {
    /// User data carried with each block to its [`PageGuard`](crate::PageGuard).
    type Data;

    /// The next block, or `None` at the end of the stream.
    fn next_block(&mut self) -> Option<(BlockNumber, Self::Data)>;
}

impl<S: BlockSource + ?Sized> BlockSource for Box<S> {
    type Data = S::Data;
    fn next_block(&mut self) -> Option<(BlockNumber, S::Data)> {
        (**self).next_block()
    }
}

/// Blocks `range.start, range.start + 1, …, range.end - 1`.
#[derive(Debug, Clone)]
pub struct Forward(Range<BlockNumber>);

/// Blocks `range.end - 1` down to `range.start`.
#[derive(Debug, Clone)]
pub struct Backward(Range<BlockNumber>);

/// Every block of `range`, ascending.
pub fn forward(range: Range<BlockNumber>) -> Forward {
    Forward(range)
}

/// Every block of `range`, descending (a backward scan).
pub fn backward(range: Range<BlockNumber>) -> Backward {
    Backward(range)
}

impl BlockSource for Forward {
    type Data = ();
    #[inline]
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        self.0.next().map(|b| (b, ()))
    }
}

impl BlockSource for Backward {
    type Data = ();
    #[inline]
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        self.0.next_back().map(|b| (b, ()))
    }
}

/// Blocks from any iterator of block numbers (random, sparse, repeated …).
#[derive(Debug, Clone)]
pub struct Iter<I>(I);

/// Blocks from an iterator of block numbers.
///
/// ```
/// let s = pagestream::source::iter(vec![7u64, 3, 3, 9]);
/// # let _ = s;
/// ```
pub fn iter<I: IntoIterator<Item = BlockNumber>>(it: I) -> Iter<I::IntoIter> {
    Iter(it.into_iter())
}

impl<I: Iterator<Item = BlockNumber>> BlockSource for Iter<I> {
    type Data = ();
    #[inline]
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        self.0.next().map(|b| (b, ()))
    }
}

/// Blocks and their user data from an iterator of `(block, data)` pairs.
#[derive(Debug, Clone)]
pub struct WithData<I>(I);

/// Blocks with per-block user data, e.g. a bitmap heap scan's matching
/// tuple offsets.
///
/// ```
/// let s = pagestream::source::with_data(vec![(4u64, "a"), (9, "b")]);
/// # let _ = s;
/// ```
pub fn with_data<D, I: IntoIterator<Item = (BlockNumber, D)>>(it: I) -> WithData<I::IntoIter> {
    WithData(it.into_iter())
}

impl<D, I: Iterator<Item = (BlockNumber, D)>> BlockSource for WithData<I> {
    type Data = D;
    #[inline]
    fn next_block(&mut self) -> Option<(BlockNumber, D)> {
        self.0.next()
    }
}

// ---------------------------------------------------------------------------
// Parallel scans: a shared block allocator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Largest chunk a parallel scan hands out (PostgreSQL's
/// `PARALLEL_SEQSCAN_MAX_CHUNK_SIZE`).
pub const PARALLEL_MAX_CHUNK: u64 = 8192;
/// Aim for this many chunks per scan (`PARALLEL_SEQSCAN_NCHUNKS`).
const PARALLEL_NCHUNKS: u64 = 2048;
/// Chunks shrink over the last this many chunks (`PARALLEL_SEQSCAN_RAMPDOWN_CHUNKS`).
const PARALLEL_RAMPDOWN: u64 = 64;

/// A parallel scan of blocks `0..nblocks`: several worker streams share one
/// allocator that hands out chunks, so every block goes to exactly one
/// worker and each worker's chunks are runs it can combine into large
/// reads. Chunks are large (about `nblocks / 2048`, a power of two, at most
/// 8192 blocks) and halve over the last 64 chunks so workers finish together,
/// as PostgreSQL's parallel sequential scan does.
///
/// ```
/// use pagestream::source::{BlockSource, ParallelScan};
/// let scan = ParallelScan::new(100);
/// let (mut a, mut b) = (scan.worker(), scan.worker());
/// let mut seen = Vec::new();
/// loop {
///     let x = a.next_block();
///     let y = b.next_block();
///     if x.is_none() && y.is_none() { break }
///     seen.extend(x.map(|p| p.0)); seen.extend(y.map(|p| p.0));
/// }
/// seen.sort();
/// assert_eq!(seen, (0..100).collect::<Vec<_>>());
/// ```
#[derive(Debug, Clone)]
pub struct ParallelScan {
    shared: Arc<ParallelShared>,
}

#[derive(Debug)]
struct ParallelShared {
    nblocks: u64,
    chunk: u64,
    next: AtomicU64,
}

impl ParallelScan {
    /// A parallel scan of `0..nblocks`.
    pub fn new(nblocks: u64) -> Self {
        let chunk = (nblocks / PARALLEL_NCHUNKS)
            .max(1)
            .next_power_of_two()
            .min(PARALLEL_MAX_CHUNK);
        ParallelScan {
            shared: Arc::new(ParallelShared {
                nblocks,
                chunk,
                next: AtomicU64::new(0),
            }),
        }
    }

    /// The chunk size it starts with.
    pub fn chunk_size(&self) -> u64 {
        self.shared.chunk
    }

    /// A source for one more worker.
    pub fn worker(&self) -> ParallelWorker {
        ParallelWorker {
            shared: Arc::clone(&self.shared),
            chunk: self.shared.chunk,
            cur: 0,
            end: 0,
        }
    }
}

/// One worker's share of a [`ParallelScan`].
#[derive(Debug)]
pub struct ParallelWorker {
    shared: Arc<ParallelShared>,
    chunk: u64,
    cur: u64,
    end: u64,
}

impl BlockSource for ParallelWorker {
    type Data = ();
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        if self.cur == self.end {
            let sh = &self.shared;
            let rampdown_at = sh.nblocks.saturating_sub(sh.chunk * PARALLEL_RAMPDOWN);
            if self.chunk > 1 && sh.next.load(Ordering::Relaxed) >= rampdown_at {
                self.chunk /= 2;
            }
            let start = sh.next.fetch_add(self.chunk, Ordering::Relaxed);
            if start >= sh.nblocks {
                return None;
            }
            self.cur = start;
            self.end = (start + self.chunk).min(sh.nblocks);
        }
        let b = self.cur;
        self.cur += 1;
        Some((b, ()))
    }
}

// ---------------------------------------------------------------------------
// Synchronized scans.

/// How often a synchronized scan reports where it is, in blocks
/// (PostgreSQL's `SYNC_SCAN_REPORT_INTERVAL` is 128 KiB).
pub const SYNC_SCAN_REPORT_INTERVAL: u64 = 16;

/// Where running scans of each file have reached, so a new scan can start
/// there and share their reads (PostgreSQL's synchronized sequential scans).
/// Clone it freely; clones share positions. Files are named by their
/// [`FileId`] (the stream's `file.id()`); a plain `u64` converts to
/// [`FileId::new`] of it, for callers that number files themselves.
#[derive(Debug, Clone, Default)]
pub struct SyncScans {
    positions: Arc<Mutex<std::collections::HashMap<FileId, u64>>>,
}

impl SyncScans {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Where a scan of `file` should start: the last reported position, or 0.
    pub fn start_of(&self, file: impl Into<FileId>, nblocks: u64) -> u64 {
        let p = *self.lock().get(&file.into()).unwrap_or(&0);
        if p < nblocks {
            p
        } else {
            0
        }
    }

    /// Records that a scan of `file` has reached `block`, so the next scan
    /// to start begins there. A [`SyncScan`] made with
    /// [`reports_itself(false)`](SyncScan::reports_itself) leaves this to its
    /// consumer, which calls it with the block of each page it has
    /// processed (every [`SYNC_SCAN_REPORT_INTERVAL`] blocks is enough).
    ///
    /// Why the consumer: a source is asked for blocks as far ahead as the
    /// stream looks ahead, up to its whole distance (hundreds of blocks
    /// over remote storage). A position reported from there puts a new
    /// scan *ahead* of the running one, outside what the running scan has
    /// pinned; both then read the same blocks a distance apart, and on a
    /// pool smaller than that gap neither finds the other's pages. Reported
    /// by the consumer, the new scan starts inside the running scan's
    /// look-ahead (pinned, read or being read) and joins it.
    pub fn report(&self, file: impl Into<FileId>, block: u64) {
        self.lock().insert(file.into(), block);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<FileId, u64>> {
        self.positions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A scan of `0..nblocks` of `file` that starts where running scans
    /// are, wraps around, and reports its position as it goes.
    ///
    /// ```
    /// use pagestream::source::{BlockSource, SyncScans};
    /// let reg = SyncScans::new();
    /// let mut first = reg.scan(1, 100);
    /// for _ in 0..40 { first.next_block(); }
    /// let mut second = reg.scan(1, 100);
    /// let b = second.next_block().unwrap().0;
    /// assert!(b >= 16 && b < 40, "joins the first scan, got {b}");
    /// ```
    pub fn scan(&self, file: impl Into<FileId>, nblocks: u64) -> SyncScan {
        let file = file.into();
        let start = self.start_of(file, nblocks);
        SyncScan {
            reg: self.clone(),
            file,
            nblocks,
            start,
            next: start,
            done: nblocks == 0,
            reports: true,
        }
    }
}

/// A synchronized scan; see [`SyncScans::scan`].
#[derive(Debug)]
pub struct SyncScan {
    reg: SyncScans,
    file: FileId,
    nblocks: u64,
    start: u64,
    next: u64,
    done: bool,
    /// Reports its position as blocks are asked for.
    reports: bool,
}

impl SyncScan {
    /// The block this scan started at.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Whether the scan reports its position itself, every
    /// [`SYNC_SCAN_REPORT_INTERVAL`] blocks as the stream asks for them
    /// (default `true`, as PostgreSQL 17's read-stream callback does). That
    /// is the stream's look-ahead position, up to its distance ahead of the
    /// pages processed. With `false`, the consumer reports what it has
    /// processed with [`SyncScans::report`]; see there for why that shares
    /// more reads.
    ///
    /// ```
    /// use pagestream::source::{BlockSource, SyncScans};
    /// let reg = SyncScans::new();
    /// let mut first = reg.scan(1, 100).reports_itself(false);
    /// for _ in 0..40 { first.next_block(); } // looked ahead to block 39 …
    /// reg.report(1, 16);                     // … but processed up to 16
    /// assert_eq!(reg.scan(1, 100).start(), 16);
    /// ```
    pub fn reports_itself(mut self, on: bool) -> Self {
        self.reports = on;
        self
    }
}

impl BlockSource for SyncScan {
    type Data = ();
    fn next_block(&mut self) -> Option<(BlockNumber, ())> {
        if self.done {
            return None;
        }
        let b = self.next;
        if self.reports && b % SYNC_SCAN_REPORT_INTERVAL == 0 {
            self.reg.report(self.file, b);
        }
        self.next = if b + 1 == self.nblocks { 0 } else { b + 1 };
        if self.next == self.start {
            self.done = true;
        }
        Some((b, ()))
    }
}
