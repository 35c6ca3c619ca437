//! Counters that explain a run, as PostgreSQL's `EXPLAIN (ANALYZE, BUFFERS)`
//! does: per stream ([`StreamStats`], from [`ReadStream::stats`]) and per
//! pool ([`PoolStats`], from [`BufferPool::stats`]).
//!
//! [`ReadStream::stats`]: crate::ReadStream::stats
//! [`BufferPool::stats`]: crate::BufferPool::stats

use std::fmt;
use std::time::Duration;

/// What stopped look-ahead from going further at the moment it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// The adaptive distance (not a configured cap).
    Distance,
    /// `max_ios` reads were in flight.
    MaxIos,
    /// The configured pin budget, `(max_ios + 1) × io_combine_limit`.
    PinBudget,
    /// The frames the pool could spare this stream (its share of a small or
    /// busy pool).
    Frames,
}

/// Per-stream counters. Cheap to copy; `Display` prints an
/// `EXPLAIN (ANALYZE, BUFFERS)`-like summary.
///
/// A second scan of the same blocks finds them in the pool: no reads, every
/// page a hit, most of them by the fast path.
///
/// ```
/// use futures::{executor::block_on, StreamExt};
/// use pagestream::{source, testing::MemEngine, BufferPool, ReadStream, StreamStats};
///
/// let engine = MemEngine::new();
/// let file = engine.create_stamped(256, 8192);
/// let pool = BufferPool::new(512, 8192)?;
/// let scan = || -> Result<StreamStats, Box<dyn std::error::Error>> {
///     let mut pages = ReadStream::builder(&pool, engine.clone(), file.clone())
///         .io_combine_limit(16)
///         .build(source::forward(0..256))?;
///     block_on(async {
///         while let Some(page) = pages.next().await {
///             page?;
///         }
///         Ok::<_, std::io::Error>(())
///     })?;
///     Ok(pages.stats())
/// };
/// let cold = scan()?;
/// assert_eq!((cold.pages, cold.blocks_read, cold.hits), (256, 256, 0));
/// assert!(cold.max_blocks_per_read <= 16 && cold.mean_blocks_per_read() > 1.0);
/// let hot = scan()?;
/// assert_eq!((hot.pages, hot.reads, hot.hits), (256, 0, 256));
/// assert!(hot.fast_path_pages > 0);
/// println!("{hot}"); // Pages: 256 returned (… fast path)  Buffers: hit=256 read=0 …
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct StreamStats {
    /// Pages handed to the consumer.
    pub pages: u64,
    /// Pages found valid in the pool when looked up (no read needed).
    pub hits: u64,
    /// Pages handed out by the fast path: the hits it found, and the page
    /// it held when it started, which may have been read.
    pub fast_path_pages: u64,
    /// Pages this stream read from the engine (`gap_blocks` included).
    pub blocks_read: u64,
    /// Of those, pages no entry wanted, read through the gaps between
    /// wanted blocks (see `StreamBuilder::gap_limit`); they are left in the
    /// pool as cached pages (the first to be evicted).
    pub gap_blocks: u64,
    /// Reads issued (a short read's remainder is part of the same read).
    pub reads: u64,
    /// Reads the engine served from the OS page cache.
    pub cached_reads: u64,
    /// Largest read, in blocks (holes read through included).
    pub max_blocks_per_read: u64,
    /// Reads that were descending runs read as one ascending I/O.
    pub backward_reads: u64,
    /// Most reads in flight at once.
    pub max_in_flight: u64,
    /// Pages another stream was already reading, waited for instead of read.
    pub shared_reads: u64,
    /// Times the consumer had to wait for I/O.
    pub waits: u64,
    /// Time spent waiting for I/O.
    pub wait_time: Duration,
    /// Times the stream returned `Pending` to let other tasks run, its
    /// yield budget spent (see `StreamBuilder::yield_budget`); not waits.
    pub budget_yields: u64,
    /// Sum of the distance sampled at each page handed out (for the mean).
    pub distance_sum: u64,
    /// Largest look-ahead distance reached.
    pub max_distance: u64,
    /// Sum of the frames look-ahead held pinned, sampled at each page
    /// handed out (for the mean; the page handed out is not counted).
    pub pinned_sum: u64,
    /// Times look-ahead stopped, by what stopped it.
    pub limited_by_distance: u64,
    /// … because `max_ios` reads were in flight.
    pub limited_by_max_ios: u64,
    /// … because the pin budget was reached.
    pub limited_by_pin_budget: u64,
    /// … because the pool could spare no more frames.
    pub limited_by_frames: u64,
    /// Advice calls issued.
    pub advice: u64,
    /// Read-ahead windows advised below a descending scan (see
    /// `StreamBuilder::backward_readahead`); not counted in `advice`.
    pub backward_readahead: u64,
    /// Blocks re-read alone after a combined read failed or was cancelled.
    pub retries: u64,
    /// Errors handed to the consumer.
    pub errors: u64,
}

impl StreamStats {
    /// Mean blocks per read.
    pub fn mean_blocks_per_read(&self) -> f64 {
        if self.reads == 0 {
            0.0
        } else {
            self.blocks_read as f64 / self.reads as f64
        }
    }

    /// Mean frames look-ahead held pinned over the pages handed out.
    pub fn mean_pinned(&self) -> f64 {
        if self.pages == 0 {
            0.0
        } else {
            self.pinned_sum as f64 / self.pages as f64
        }
    }

    /// Mean look-ahead distance over the pages handed out.
    pub fn mean_distance(&self) -> f64 {
        if self.pages == 0 {
            0.0
        } else {
            self.distance_sum as f64 / self.pages as f64
        }
    }

    /// The limit that stopped look-ahead most often, if it ever stopped.
    pub fn binding_limit(&self) -> Option<Limit> {
        [
            (self.limited_by_distance, Limit::Distance),
            (self.limited_by_max_ios, Limit::MaxIos),
            (self.limited_by_pin_budget, Limit::PinBudget),
            (self.limited_by_frames, Limit::Frames),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .max_by_key(|(n, _)| *n)
        .map(|(_, l)| l)
    }

    pub(crate) fn record_limit(&mut self, l: Limit) {
        match l {
            Limit::Distance => self.limited_by_distance += 1,
            Limit::MaxIos => self.limited_by_max_ios += 1,
            Limit::PinBudget => self.limited_by_pin_budget += 1,
            Limit::Frames => self.limited_by_frames += 1,
        }
    }

    /// Adds `other`'s counters to these (maxima are maxima).
    pub fn merge(&mut self, o: &StreamStats) {
        self.pages += o.pages;
        self.hits += o.hits;
        self.fast_path_pages += o.fast_path_pages;
        self.blocks_read += o.blocks_read;
        self.gap_blocks += o.gap_blocks;
        self.reads += o.reads;
        self.cached_reads += o.cached_reads;
        self.max_blocks_per_read = self.max_blocks_per_read.max(o.max_blocks_per_read);
        self.backward_reads += o.backward_reads;
        self.max_in_flight = self.max_in_flight.max(o.max_in_flight);
        self.shared_reads += o.shared_reads;
        self.waits += o.waits;
        self.wait_time += o.wait_time;
        self.budget_yields += o.budget_yields;
        self.distance_sum += o.distance_sum;
        self.max_distance = self.max_distance.max(o.max_distance);
        self.pinned_sum += o.pinned_sum;
        self.limited_by_distance += o.limited_by_distance;
        self.limited_by_max_ios += o.limited_by_max_ios;
        self.limited_by_pin_budget += o.limited_by_pin_budget;
        self.limited_by_frames += o.limited_by_frames;
        self.advice += o.advice;
        self.backward_readahead += o.backward_readahead;
        self.retries += o.retries;
        self.errors += o.errors;
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Distance => "distance",
            Limit::MaxIos => "max_ios",
            Limit::PinBudget => "pin budget",
            Limit::Frames => "pool frames",
        })
    }
}

impl fmt::Display for StreamStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Pages: {} returned ({} fast path)  Buffers: hit={} read={} (gaps={}) shared={}",
            self.pages,
            self.fast_path_pages,
            self.hits,
            self.blocks_read,
            self.gap_blocks,
            self.shared_reads
        )?;
        writeln!(
            f,
            "I/O: reads={} (backward={} cached={}) blocks/read mean={:.2} max={}  in flight max={}  advice={} (windows below={})",
            self.reads,
            self.backward_reads,
            self.cached_reads,
            self.mean_blocks_per_read(),
            self.max_blocks_per_read,
            self.max_in_flight,
            self.advice,
            self.backward_readahead
        )?;
        writeln!(
            f,
            "Waits: {} totalling {:.3} ms  Yields: {}  Distance: mean={:.1} max={}  Pinned: mean={:.1}",
            self.waits,
            self.wait_time.as_secs_f64() * 1e3,
            self.budget_yields,
            self.mean_distance(),
            self.max_distance,
            self.mean_pinned()
        )?;
        write!(
            f,
            "Look-ahead stopped by: distance={} max_ios={} pin budget={} pool frames={}",
            self.limited_by_distance,
            self.limited_by_max_ios,
            self.limited_by_pin_budget,
            self.limited_by_frames
        )?;
        if let Some(l) = self.binding_limit() {
            write!(f, " (mostly {l})")?;
        }
        if self.retries + self.errors > 0 {
            write!(f, "\nRetries: {}  Errors: {}", self.retries, self.errors)?;
        }
        Ok(())
    }
}

/// A snapshot of a pool.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Frames in the pool.
    pub frames: usize,
    /// Block size.
    pub block_size: usize,
    /// Frames pinned right now.
    pub pinned: usize,
    /// Frames holding a valid block.
    pub valid: usize,
    /// Frames being read.
    pub reading: usize,
    /// Valid frames reused for another block. A live stream adds those it
    /// made through its ring in batches of 64, and the rest when it ends.
    pub evictions: u64,
    /// Frames reused from a stream's ring (a live stream's, likewise, in
    /// batches of 64).
    pub ring_reuses: u64,
    /// Times a clock sweep found every frame pinned.
    pub exhausted: u64,
    /// Live streams.
    pub streams: usize,
    /// Counters of every stream that has ended, summed.
    pub ended_streams: StreamStats,
}

impl fmt::Display for PoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Pool: {} frames x {} B  valid={} pinned={} reading={}  evictions={} ring reuses={} exhausted={}  streams live={}",
            self.frames,
            self.block_size,
            self.valid,
            self.pinned,
            self.reading,
            self.evictions,
            self.ring_reuses,
            self.exhausted,
            self.streams
        )
    }
}

/// An engine's counters as `(name, value)` pairs, in one shape for every
/// engine: each engine's own stats type (with its fields, for code that
/// knows the engine) converts into this, for reports that do not. Each
/// engine names its own counters (`reads`, `bytes`, `nowait_full`, …);
/// durations are in nanoseconds, under names ending in `_nanos`.
///
/// ```
/// use pagestream::EngineCounters;
/// let before = EngineCounters(vec![("reads", 3)]);
/// let now = EngineCounters(vec![("reads", 10), ("bytes", 4096)]);
/// let d = now.since(&before);
/// assert_eq!((d.get("reads"), d.get("bytes")), (Some(7), Some(4096)));
/// assert_eq!(d.to_string(), "reads=7 bytes=4096");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineCounters(pub Vec<(&'static str, u64)>);

impl EngineCounters {
    /// What happened between `before` and `self` (counter by counter;
    /// counters missing from `before` count from 0).
    pub fn since(&self, before: &EngineCounters) -> EngineCounters {
        EngineCounters(
            self.0
                .iter()
                .map(|&(name, v)| (name, v.wrapping_sub(before.get(name).unwrap_or(0))))
                .collect(),
        )
    }

    /// The counter `name`, if the engine has one.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
    }
}

/// `name=value` pairs separated by spaces.
impl fmt::Display for EngineCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={v}")?;
        }
        Ok(())
    }
}
