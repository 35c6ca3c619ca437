//! The look-ahead planner: PostgreSQL's read-stream state machine, pure and
//! synchronous.
//!
//! What the planner decides — combining forward and backward, when a read
//! starts, how the distance moves (behaviours A, B and C), the fast path,
//! advice, failures — is written once, in the crate's design document
//! (`docs/design.md` §2, rendered as [`crate::design`]). This page says
//! only how this module is put together.
//!
//! The planner never touches the pool or an engine itself: it asks an
//! [`Env`] (the stream's binding to the source, pool and engine in
//! `stream.rs`, or a simulated one in the property tests) and is told when
//! reads finish.
//!
//! ```text
//!          source ──next_block──▶ [ pending read ] ──start──▶ engine
//!                                        │                      │
//!   consumer ◀──pop── [ Ready | Io | Busy | … queue … | Pending… ]◀─ read done
//! ```
//!
//! - The queue holds [`Entry`]s in source order; its last `pending_n`
//!   entries are the pending read, not yet looked up.
//! - `handing` is the one entry `pop` hands out while it looks ahead, and
//!   `stashed` a block taken from the source but not yet queued. Both live
//!   in the planner, not on the stack, so that whenever user code runs (the
//!   source, the engine through [`Env`], the drop of a block's data) every
//!   pin is where `reset`, and so the stream's drop, releases it.
//! - The fast path is left before the engine runs, and a read's frames
//!   belong to its request before the engine sees it (see
//!   [`Env::start_read`]).
//! - `reset` drops the old entries' data only once every other field is
//!   reset.

mod entry;
#[cfg(test)]
mod tests;

pub(crate) use entry::{Entry, Slot, NO_FRAME};

use crate::error::ReadError;
use crate::pool::{Lookup, Status};
use crate::stats::{Limit, StreamStats};
use crate::BlockNumber;
use std::collections::VecDeque;
use std::io;

/// When to give the engine read-ahead advice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AdvicePolicy {
    /// Advise reads that do not continue the previous one, where the engine
    /// says advice helps (blocking engines on buffered files); every read if
    /// the file has no kernel read-ahead.
    #[default]
    Auto,
    /// Advise every read where the engine accepts advice (kernel read-ahead
    /// off, `POSIX_FADV_RANDOM`, network file systems).
    Always,
    /// Never advise.
    Never,
}

/// What the planner needs from the world.
pub(crate) trait Env<D> {
    /// The source's next block.
    fn next_block(&mut self) -> Option<(BlockNumber, D)>;
    /// Whether `block` exists in the file.
    fn check_block(&self, block: BlockNumber) -> Result<(), ReadError>;
    /// The pool's answer for `block`; every `Ok` holds a pin.
    fn lookup(&mut self, block: BlockNumber) -> Result<Lookup, ()>;
    /// Whether the pool holds `block`, valid, now (no pin: a hint).
    fn resident(&mut self, block: BlockNumber) -> bool;
    /// The status of a frame this stream has pinned.
    fn frame_status(&self, frame: u32) -> Status;
    /// Re-examines a frame this stream has pinned: Hit, Busy, or Read if it
    /// was EMPTY and this stream now owns its I/O.
    fn claim_io(&mut self, frame: u32) -> Lookup;
    /// Drops a pin.
    fn unpin(&mut self, frame: u32);
    /// Starts a read into `frames` (ascending blocks from `first`), giving
    /// the engine advice for it first if `advise`. The frames are in IO from
    /// the moment they are claimed, so the request that ends their IO must
    /// own them before any engine code (advice included) runs: if that code
    /// panics, dropping the request ends the read as cancelled. `gaps`, a
    /// subset of `frames`, are blocks the read covers but no entry wants
    /// (see [`PlanConfig::gap_limit`]): their pins are dropped once the
    /// request owns them, before any engine code runs (a frame in IO is
    /// never taken for another block, pinned or not; the read makes it a
    /// cached page, or an empty one if it fails).
    fn start_read(
        &mut self,
        slot: u32,
        first: BlockNumber,
        frames: Vec<u32>,
        gaps: &[u32],
        descending: bool,
        advise: bool,
    );
    /// Gives up a frame this stream claimed for a read (a [`Lookup::Read`])
    /// that it will not start after all: its IO ends, empty, and its pin
    /// is dropped.
    fn abandon(&mut self, frame: u32);
    /// Advice that the `n` blocks from `first` will be read soon, not tied
    /// to a read (a descending scan's read-ahead window). Returns whether
    /// the engine took it.
    fn advise(&mut self, first: BlockNumber, n: u64) -> bool;
    /// Frames this stream may hold for look-ahead now. `reader`: whether
    /// the stream is reading blocks itself (its last look-ahead started a
    /// read) rather than following reads other streams make (it only found
    /// their blocks being read or cached); only a reader claims frames of
    /// its own from the pool.
    fn frames_available(&mut self, reader: bool) -> usize;
    /// Tells the stream's ring (if it has one) how many of its slots to
    /// cycle through. While the stream's reads come from the page cache:
    /// what look-ahead can pin now, the distance (the queued entries, the
    /// read being put together among them) plus one read's worth of slack,
    /// for the page being handed out and for a distance this look-ahead
    /// raises as it goes; the pages the consumer holds are not counted (the
    /// ring widens its window when it finds their frames busy). Otherwise
    /// `usize::MAX`: every slot.
    fn ring_window(&mut self, _frames: usize) {}
}

/// Limits and switches, validated by the builder.
#[derive(Debug, Clone)]
pub(crate) struct PlanConfig {
    /// Reads in flight at most (≥ 1).
    pub(crate) max_ios: usize,
    /// Blocks per read at most (≥ 1).
    pub(crate) combine: usize,
    /// Pins at most for look-ahead.
    pub(crate) budget: usize,
    pub(crate) advice: AdvicePolicy,
    /// Engine and file accept advice, and `max_ios > 0` was configured.
    pub(crate) advice_possible: bool,
    /// The file has kernel read-ahead.
    pub(crate) kernel_readahead: bool,
    pub(crate) backward_combining: bool,
    pub(crate) fast_path: bool,
    /// Start at distance `min(budget, combine)` (PostgreSQL's READ_STREAM_FULL).
    pub(crate) full: bool,
    /// Every read this stream starts raises the distance to the cap at
    /// once (the engine's [`crate::EngineHints::full_look_ahead`]), instead
    /// of the doubling per read head.
    pub(crate) full_look_ahead: bool,
    /// Full-sized reads to keep in flight while reads are served from the
    /// OS page cache (the engine's [`crate::EngineHints::cached_reads`];
    /// `Planner::new` clamps it to `1..=MAX_IOS`).
    pub(crate) cached_depth: usize,
    /// Blocks per segment of a file stored in pieces (no read crosses a
    /// multiple of it); 0: one piece.
    pub(crate) segment_blocks: u64,
    /// A failed read of several blocks is retried block by block (the
    /// engine's [`crate::EngineHints::retry_blocks`]); else its error is
    /// every block's.
    pub(crate) retry_blocks: bool,
    /// Blocks of a descending scan's own read-ahead window (see
    /// [`Planner::read_ahead_below`]); 0: none (`Planner::new` makes it 0
    /// where no window applies).
    pub(crate) backward_readahead: u64,
    /// Unwanted blocks an ascending read may cover between two wanted ones
    /// (reading a small hole costs less than a second read); 0: none.
    pub(crate) gap_limit: usize,
}

impl PlanConfig {
    /// The distance a stream starts at, and starts again at after a reset.
    fn start_distance(&self) -> usize {
        if self.full {
            self.budget.min(self.combine)
        } else {
            1
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    One,
    Up,
    Down,
}

#[derive(Debug)]
struct IoInfo {
    /// Queue sequence number of the read's first entry (queue order).
    first_seq: u64,
    /// The read's entries (its blocks, less the gaps it reads through).
    n: usize,
    /// Its blocks that no entry wants (their frames are in IO, unpinned).
    gaps: usize,
    /// The entries were dropped by a reset; only the slot remains.
    orphan: bool,
}

/// What the head of the queue needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    /// Can be popped (a page or an error).
    Ready,
    /// Waits for one of this stream's reads.
    WaitRead,
    /// Waits for another stream's read of this frame.
    WaitFrame(u32),
    /// The stream has ended.
    End,
    /// No frame can be had and nothing is in flight (the head stays).
    Exhausted,
}

/// The planner. See the module docs.
#[derive(Debug)]
pub(crate) struct Planner<D> {
    cfg: PlanConfig,
    queue: VecDeque<Entry<D>>,
    /// Sequence number of `queue[0]`.
    head_seq: u64,
    /// The tail entries forming the pending read.
    pending_n: usize,
    /// Whether the last read handed out came from the OS page cache: the
    /// stream then keeps little ahead, and its ring cycles through a
    /// window of what look-ahead pins (see [`Env::ring_window`]).
    last_cached: bool,
    dir: Dir,
    /// Entries holding a pin.
    pinned: usize,
    /// The read-ahead distance: entries queued at most (see `look_ahead`).
    distance: usize,
    /// Blocks a pending read may grow to while nothing else is queued, even
    /// past `distance` (capped by `eff_combine` where it is used; it grows
    /// to `io_combine_limit`): so that a stream whose
    /// consumer never waits, and whose distance so stays short, still
    /// reads in large requests.
    combine_distance: usize,
    /// Hits still to go before a hit lowers the distances: taking the first
    /// page of a read from the device sets it to the cap.
    decay_holdoff: usize,
    /// Pages still to be handed out of those queued when the consumer last
    /// waited (see `note_wait`): the reads it waited behind. Taking the
    /// first page of one of them doubles the distance.
    waited_behind: usize,
    /// Read slots; `Some` while the read is in flight.
    ios: Vec<Option<IoInfo>>,
    free_ios: Vec<u32>,
    ios_in_progress: usize,
    /// The last read started: its first block, its blocks, and whether it
    /// was a descending run. A read starting right after an ascending one
    /// continues a sequential scan (which the kernel reads ahead for); one
    /// ending right below any read continues a descending scan.
    last_read: Option<(BlockNumber, u64, bool)>,
    /// Reads in a row that each ended right below the one before.
    descent: u32,
    /// Lowest block a descending scan's read-ahead window has advised.
    advised_low: Option<BlockNumber>,
    /// A block taken from the source but not yet queued (never set once
    /// the source has ended).
    stashed: Option<(BlockNumber, D)>,
    /// The source has returned `None`: it is not asked again until `reset`.
    exhausted: bool,
    /// The entry [`pop`](Self::pop) is handing out while it looks ahead.
    /// Look-ahead runs user code (the source, the engine); held here rather
    /// than on `pop`'s stack, an entry whose hand-out is cut short by a panic
    /// stays where `reset` (and so the stream's drop) releases its pin, and
    /// the next poll hands it out.
    handing: Option<Entry<D>>,
    in_fast_path: bool,
    /// Frames the pool could spare at the last look-ahead.
    frames_limit: usize,
    /// Whether this stream reads blocks itself, as far as the last
    /// look-ahead that looked anything up could tell (see
    /// [`Env::frames_available`]).
    reader: bool,
    /// This look-ahead started a read / pinned a block another stream read
    /// or is reading.
    issued_any: bool,
    followed_any: bool,
    /// Emptied frame lists of finished reads, reused for new ones.
    spare_runs: Vec<Vec<u32>>,
    /// The frames of the read being put together that no entry wants
    /// (kept for its allocation).
    gap_frames: Vec<u32>,
    /// Frames of reads in flight that no entry pins (their gaps): they
    /// count against the frames look-ahead may take, like pins.
    gaps_in_flight: usize,
    pub(crate) stats: StreamStats,
}

/// Look-ahead entries the queue is allocated for up front.
const QUEUE_CAPACITY: usize = 4096;

impl<D> Planner<D> {
    pub(crate) fn new(mut cfg: PlanConfig) -> Self {
        // The engine's wish, whatever it returned: more reads in flight
        // than `MAX_IOS` cannot be wanted (the distance is capped by the pin
        // budget anyway), and the distance target below must not overflow.
        cfg.cached_depth = cfg.cached_depth.clamp(1, crate::MAX_IOS);
        // A descending scan's read-ahead window only where advice is taken
        // and the kernel reads ahead, and only if larger than two
        // full-sized reads (a smaller one adds nothing to the reads' own
        // advice): else none.
        if !cfg.advice_possible
            || !cfg.kernel_readahead
            || cfg.advice == AdvicePolicy::Never
            || cfg.backward_readahead <= 2 * cfg.combine as u64
        {
            cfg.backward_readahead = 0;
        }
        let distance = cfg.start_distance();
        Planner {
            combine_distance: distance,
            decay_holdoff: 0,
            waited_behind: 0,
            ios: (0..cfg.max_ios).map(|_| None).collect(),
            free_ios: (0..cfg.max_ios as u32).rev().collect(),
            frames_limit: cfg.budget,
            reader: true,
            issued_any: false,
            followed_any: false,
            // The budget may be far larger than the pool (it is clamped to
            // the frames available as reads start): the queue grows to what
            // look-ahead really reaches.
            queue: VecDeque::with_capacity(cfg.budget.min(QUEUE_CAPACITY) + 1),
            cfg,
            head_seq: 0,
            pending_n: 0,
            last_cached: false,
            dir: Dir::One,
            pinned: 0,
            distance,
            ios_in_progress: 0,
            last_read: None,
            descent: 0,
            advised_low: None,
            stashed: None,
            exhausted: false,
            handing: None,
            in_fast_path: false,
            spare_runs: Vec::new(),
            gap_frames: Vec::new(),
            gaps_in_flight: 0,
            stats: StreamStats::default(),
        }
    }

    /// Takes back a finished read's frame list for a later read (at most
    /// one per read slot is kept).
    pub(crate) fn recycle(&mut self, mut frames: Vec<u32>) {
        if self.spare_runs.len() < self.cfg.max_ios && frames.capacity() > 0 {
            frames.clear();
            self.spare_runs.push(frames);
        }
    }

    pub(crate) fn distance(&self) -> usize {
        self.distance
    }

    pub(crate) fn ios_in_progress(&self) -> usize {
        self.ios_in_progress
    }

    /// Entries queued (the property tests' view of what a wait is behind).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn pinned(&self) -> usize {
        self.pinned
    }

    /// The frame of the next entry to hand out, if it is ready.
    #[inline]
    pub(crate) fn next_ready_frame(&self) -> Option<u32> {
        match self.queue.front() {
            Some(e) if matches!(e.slot, Slot::Ready) => Some(e.frame),
            _ => None,
        }
    }

    /// The consumer waits for the head entry: it asked for it and its read
    /// (or another stream's) has not finished; the stream then does a read
    /// the engine queued on its own thread (a synchronous read is a wait
    /// too) or returns `Pending`. Taking the first page of a read
    /// queued then doubles the distance.
    pub(crate) fn note_wait(&mut self) {
        self.waited_behind = self.waited_behind.max(self.queue.len());
    }

    pub(crate) fn in_fast_path(&self) -> bool {
        self.in_fast_path
    }

    /// Distance cap right now.
    fn cap(&self) -> usize {
        self.cfg.budget.min(self.frames_limit).max(1)
    }

    /// Blocks per read right now: the combine limit, unless frames are so
    /// scarce that full-sized reads would leave `max_ios` unused; then the
    /// smallest size at which `max_ios` reads cover the frames, so as many
    /// pages as the frames allow are in flight, in as many reads as allowed.
    fn eff_combine(&self) -> usize {
        let cap = self.cap();
        if cap >= self.cfg.budget {
            self.cfg.combine
        } else {
            cap.div_ceil(self.cfg.max_ios).clamp(1, self.cfg.combine)
        }
    }

    fn advise_this(&self, first: BlockNumber, descending: bool) -> bool {
        if !self.cfg.advice_possible {
            return false;
        }
        match self.cfg.advice {
            AdvicePolicy::Never => false,
            AdvicePolicy::Always => true,
            AdvicePolicy::Auto => {
                let sequential = self
                    .last_read
                    .is_some_and(|(f, n, down)| !down && f + n == first);
                !self.cfg.kernel_readahead || descending || !sequential
            }
        }
    }

    /// Whether look-ahead goes on past the distance to let the pending read
    /// grow: nothing is queued ahead of it (so the consumer waits for this
    /// read next anyway, and a larger one costs it little more), and it is
    /// shorter than the combine distance (PostgreSQL 19 splits the two).
    fn grows_past_distance(&self, eff_combine: usize) -> bool {
        self.pending_n > 0
            && self.queue.len() == self.pending_n
            && self.pending_blocks() < self.combine_distance.min(eff_combine)
    }

    /// Whether `b` continues the pending run.
    fn extends(&self, b: BlockNumber) -> bool {
        if self.pending_n == 0 {
            return false;
        }
        // Planted bug: never grow a read past three blocks.
        #[cfg(pagestream_mutant = "drop_combine")]
        if self.pending_n == 3 {
            return false;
        }
        let last = match self.queue.back() {
            Some(e) => e.block,
            None => return false,
        };
        let adjacent = match self.dir {
            Dir::One => {
                b == last.wrapping_add(1)
                    || self.across_gap(last, b)
                    || (self.cfg.backward_combining && last > 0 && b == last - 1)
            }
            Dir::Up => b == last.wrapping_add(1) || self.across_gap(last, b),
            Dir::Down => last > 0 && b == last - 1,
        };
        // A read never spans two segments (it would be two reads of two
        // files), so a boundary ends the pending read.
        adjacent
            && (self.cfg.segment_blocks == 0
                || b / self.cfg.segment_blocks == last / self.cfg.segment_blocks)
    }

    /// Whether `b` may join an ascending pending read ending at `last`
    /// across a gap of at most `gap_limit` unwanted blocks, the read still
    /// no longer than a full-sized one.
    fn across_gap(&self, last: BlockNumber, b: BlockNumber) -> bool {
        let limit = self.cfg.gap_limit as u64;
        if limit == 0 || b <= last.saturating_add(1) || b - last - 1 > limit {
            return false;
        }
        let first = self.queue[self.queue.len() - self.pending_n].block;
        b - first < self.eff_combine() as u64
    }

    /// Blocks the pending read covers: its entries, and the gaps between
    /// them if it reads through any.
    fn pending_blocks(&self) -> usize {
        match (self.dir, self.queue.back()) {
            (Dir::Up, Some(last)) if self.cfg.gap_limit > 0 => {
                let first = self.queue[self.queue.len() - self.pending_n].block;
                (last.block - first) as usize + 1
            }
            _ => self.pending_n,
        }
    }

    /// The next block from the source: the stashed one first. Once the
    /// source has returned `None` it is not asked again until `reset` (the
    /// end of a source is final; see [`BlockSource`](crate::BlockSource)).
    #[inline]
    fn pull(&mut self, env: &mut impl Env<D>) -> Option<(BlockNumber, D)> {
        if let Some(x) = self.stashed.take() {
            return Some(x);
        }
        if self.exhausted {
            return None;
        }
        let next = env.next_block();
        // Planted bug (the review's): forget that the source has ended, and
        // ask it again.
        if cfg!(pagestream_mutant = "unfused") {
            return next;
        }
        if next.is_none() {
            self.exhausted = true;
        }
        next
    }

    /// Looks ahead as far as distance and limits allow. PostgreSQL's
    /// `read_stream_look_ahead`.
    pub(crate) fn look_ahead(&mut self, env: &mut impl Env<D>) {
        debug_assert!(!(self.exhausted && self.stashed.is_some()));
        if self.exhausted && self.pending_n == 0 {
            return;
        }
        self.frames_limit = env.frames_available(self.reader);
        let cap = self.cap();
        if self.distance > cap {
            self.distance = cap;
        }
        let eff_combine = self.eff_combine();
        // A stream waiting for its reads ramps up to a deep look-ahead: its
        // ring stays whole, so that its slots keep the runs of adjacent
        // frames they were filled with (a window moving with the distance
        // would split reads across frames filled at different times).
        env.ring_window(if self.last_cached {
            self.distance + eff_combine
        } else {
            usize::MAX
        });
        let mut stop;
        // Passes: a read started under full look-ahead raises the distance
        // (see `issue`), and the look-ahead goes on at the new distance.
        loop {
            let before = self.distance;
            stop = None;
            loop {
                if self.ios_in_progress >= self.cfg.max_ios {
                    stop = Some(Limit::MaxIos);
                    break;
                }
                // Every queued entry counts, errors included: a block past the
                // end holds no pin, but a source naming nothing else must still
                // be pulled only as far as the distance.
                if self.queue.len() >= self.distance {
                    // Under full look-ahead, a pending read that will have
                    // to go to the engine takes the whole distance at once,
                    // so that even the first read is full-sized (`issue`
                    // raises it too, for reads started otherwise).
                    if self.cfg.full_look_ahead && self.distance < cap && self.pending_n > 0 {
                        let first = self.queue[self.queue.len() - self.pending_n].block;
                        if !env.resident(first) {
                            self.distance = cap;
                            continue;
                        }
                    }
                    if !self.grows_past_distance(eff_combine) {
                        stop = Some(if self.distance >= self.cfg.budget {
                            Limit::PinBudget
                        } else if self.distance >= cap {
                            Limit::Frames
                        } else {
                            Limit::Distance
                        });
                        break;
                    }
                }
                if self.pending_blocks() >= eff_combine {
                    if !self.start_pending(env, eff_combine) {
                        break;
                    }
                    continue;
                }
                let Some((b, d)) = self.pull(env) else {
                    break;
                };
                let valid = env.check_block(b);
                if valid.is_ok() && self.extends(b) {
                    if self.pending_n == 1 {
                        let last = self.queue.back().map_or(0, |e| e.block);
                        self.dir = if b > last { Dir::Up } else { Dir::Down };
                    }
                    self.queue.push_back(Entry::pending(b, d));
                    self.pending_n += 1;
                    continue;
                }
                // `b` cannot join the pending read: start that first. Starting
                // it runs the engine, so `b` waits in the stash, not on this
                // stack: if the engine panics, the next look-ahead takes it.
                let (b, d) = if self.pending_n > 0 {
                    self.stashed = Some((b, d));
                    while self.pending_n > 0 {
                        if self.ios_in_progress >= self.cfg.max_ios
                            || !self.start_pending(env, eff_combine)
                        {
                            stop = Some(if self.ios_in_progress >= self.cfg.max_ios {
                                Limit::MaxIos
                            } else {
                                Limit::Frames
                            });
                            break;
                        }
                    }
                    if self.pending_n > 0 {
                        break;
                    }
                    self.stashed.take().expect("the block stashed above")
                } else {
                    (b, d)
                };
                match valid {
                    Ok(()) => {
                        self.queue.push_back(Entry::pending(b, d));
                        self.pending_n = 1;
                        self.dir = Dir::One;
                    }
                    Err(e) => self.queue.push_back(Entry::failed(b, d, e.into())),
                }
            }
            if self.pending_n > 0
                && self.ios_in_progress < self.cfg.max_ios
                && (self.pending_blocks() >= eff_combine
                    || (self.queue.len() >= self.distance && self.pinned == 0)
                    || self.exhausted)
            {
                self.start_pending(env, eff_combine);
            }
            if self.distance <= before {
                break;
            }
        }
        if let Some(l) = stop {
            if !self.exhausted {
                self.stats.record_limit(l);
            }
        }
        // A stream whose look-ahead found only blocks other streams read
        // (a synchronized scan's followers) needs no frames of its own: it
        // gives up its claim, so the stream doing the reads can look ahead
        // with the frames instead of a share of them.
        if self.issued_any {
            self.reader = true;
        } else if self.followed_any {
            self.reader = false;
        }
        self.issued_any = false;
        self.followed_any = false;
    }

    /// Starts (part of) the pending read: hits and busy blocks at its front
    /// are pinned, then one read of consecutive misses is issued, through
    /// the gaps between them if the pending read has any (each gap whole,
    /// and only while every block of it is a miss too). Returns false if
    /// nothing could be done (no frame to be had).
    fn start_pending(&mut self, env: &mut impl Env<D>, eff_combine: usize) -> bool {
        debug_assert!(self.pending_n > 0);
        debug_assert!(self.ios_in_progress < self.cfg.max_ios);
        let start = self.queue.len() - self.pending_n;
        let cap = self.cap();
        let mut i = start;
        let mut run: Vec<u32> = self
            .spare_runs
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(eff_combine.min(self.pending_n)));
        let mut gaps = std::mem::take(&mut self.gap_frames);
        debug_assert!(gaps.is_empty());
        let mut run_start = start;
        let slot = *self
            .free_ios
            .last()
            .expect("a free read slot below max_ios");
        while i < self.queue.len() {
            // Frames held: pins, and the holes of reads in flight and of
            // this one.
            let held = self.pinned + self.gaps_in_flight + gaps.len();
            if held >= cap && self.pinned > 0 {
                break;
            }
            let block = self.queue[i].block;
            // The gap claimed to reach this block.
            let mut gap = 0;
            if !run.is_empty() {
                // The read's last block is entry `i - 1`'s (a hit or busy
                // block ends the read), so anything between is a gap.
                let prev = self.queue[i - 1].block;
                if block > prev + 1 {
                    gap = (block - prev - 1) as usize;
                    if run.len() + gap >= eff_combine
                        || held + gap >= cap
                        || !self.read_through(env, prev + 1, gap, &mut run, &mut gaps)
                    {
                        break;
                    }
                }
            }
            match env.lookup(block) {
                Err(()) => {
                    self.give_up_gap(env, gap, &mut run, &mut gaps);
                    self.stats.record_limit(Limit::Frames);
                    break;
                }
                Ok(l @ (Lookup::Hit(f) | Lookup::Busy(f))) => {
                    // The read ends before this block, and before its gap.
                    self.give_up_gap(env, gap, &mut run, &mut gaps);
                    self.take_non_read(i, f, matches!(l, Lookup::Busy(_)));
                    i += 1;
                    if !run.is_empty() {
                        // It ends the read; it stays pinned as the next entry.
                        break;
                    }
                }
                Ok(Lookup::Read(f)) => {
                    if run.is_empty() {
                        run_start = i;
                    }
                    let e = &mut self.queue[i];
                    e.frame = f;
                    e.slot = Slot::Io;
                    self.pinned += 1;
                    run.push(f);
                    i += 1;
                    if run.len() >= eff_combine {
                        break;
                    }
                }
            }
        }
        let progressed = i > start;
        self.pending_n -= i - start;
        if self.pending_n <= 1 {
            self.dir = if self.pending_n == 0 {
                Dir::One
            } else {
                self.dir
            };
        }
        if !run.is_empty() {
            self.issue(env, slot, run_start, run, gaps);
        } else {
            debug_assert!(gaps.is_empty());
            self.gap_frames = gaps;
            self.recycle(run);
        }
        progressed
    }

    /// Claims the `n` blocks from `first`, a gap between two blocks of the
    /// read being put together, for that read: every one must be a miss.
    /// Returns false, having claimed none of them, if one is not (or no
    /// frame can be had).
    fn read_through(
        &mut self,
        env: &mut impl Env<D>,
        first: BlockNumber,
        n: usize,
        run: &mut Vec<u32>,
        gaps: &mut Vec<u32>,
    ) -> bool {
        for k in 0..n {
            match env.lookup(first + k as u64) {
                Ok(Lookup::Read(f)) => {
                    run.push(f);
                    gaps.push(f);
                }
                other => {
                    match other {
                        // (Busy may be this stream's own read through the
                        // block.)
                        Ok(Lookup::Hit(f) | Lookup::Busy(f)) => env.unpin(f),
                        _ => self.stats.record_limit(Limit::Frames),
                    }
                    self.give_up_gap(env, k, run, gaps);
                    return false;
                }
            }
        }
        true
    }

    /// Gives up the last `n` frames claimed for a gap of the read being put
    /// together.
    fn give_up_gap(
        &mut self,
        env: &mut impl Env<D>,
        n: usize,
        run: &mut Vec<u32>,
        gaps: &mut Vec<u32>,
    ) {
        for _ in 0..n {
            let f = run.pop().expect("a gap frame");
            let g = gaps.pop();
            debug_assert_eq!(g, Some(f));
            env.abandon(f);
        }
    }

    /// Records a pinned hit or busy block at queue index `i`.
    fn take_non_read(&mut self, i: usize, f: u32, busy: bool) {
        let e = &mut self.queue[i];
        e.frame = f;
        self.pinned += 1;
        self.followed_any = true;
        if busy {
            e.slot = Slot::Busy;
            // A block another stream is reading costs this stream a wait
            // like its own read: it moves the distance like one (PostgreSQL
            // waits for a foreign I/O the same way). Followers of a
            // synchronized scan so keep looking ahead over the reader's
            // blocks, pinning them until they take them, instead of decaying
            // to one block and losing them to eviction.
            e.read_head = true;
            self.stats.shared_reads += 1;
            // Under full look-ahead, like a read it starts: all the distance
            // at once, so that it waits for (and keeps wanted) every read
            // of the other stream's that it will need.
            if self.cfg.full_look_ahead {
                self.distance = self.distance.max(self.cap());
            }
        } else {
            e.slot = Slot::Ready;
            self.stats.hits += 1;
            self.decay();
        }
    }

    /// A hit: the distances fall by one, once `decay_holdoff` hits have
    /// gone by since the last read from the device.
    fn decay(&mut self) {
        if self.decay_holdoff > 0 {
            self.decay_holdoff -= 1;
            return;
        }
        if self.distance > 1 {
            self.distance -= 1;
        }
        if self.combine_distance > 1 {
            self.combine_distance -= 1;
        }
    }

    /// Issues one read of the misses `run` (frames in queue order, and in
    /// block order for an ascending read) whose first entry is at queue
    /// index `run_start`; `gaps` (a subset of `run`) are read through, the
    /// others are queued entries.
    fn issue(
        &mut self,
        env: &mut impl Env<D>,
        slot: u32,
        run_start: usize,
        mut run: Vec<u32>,
        mut gaps: Vec<u32>,
    ) {
        let n = run.len();
        let entries = n - gaps.len();
        let b0 = self.queue[run_start].block;
        let b1 = self.queue[run_start + entries - 1].block;
        let descending = entries > 1 && b1 < b0;
        debug_assert!(gaps.is_empty() || !descending);
        let first = if descending {
            run.reverse();
            b1
        } else {
            b0
        };
        self.queue[run_start].read_head = true;
        self.issued_any = true;
        if self.cfg.full_look_ahead {
            self.distance = self.distance.max(self.cap());
        }
        let popped = self.free_ios.pop();
        debug_assert_eq!(popped, Some(slot));
        self.ios[slot as usize] = Some(IoInfo {
            first_seq: self.head_seq + run_start as u64,
            n: entries,
            gaps: gaps.len(),
            orphan: false,
        });
        self.ios_in_progress += 1;
        self.gaps_in_flight += gaps.len();
        let st = &mut self.stats;
        st.reads += 1;
        st.blocks_read += n as u64;
        st.gap_blocks += gaps.len() as u64;
        st.max_blocks_per_read = st.max_blocks_per_read.max(n as u64);
        st.max_in_flight = st.max_in_flight.max(self.ios_in_progress as u64);
        if descending {
            st.backward_reads += 1;
        }
        let advise = self.advise_this(first, descending);
        if advise {
            self.stats.advice += 1;
        }
        let window = self.read_ahead_below(first, n as u64);
        self.last_read = Some((first, n as u64, descending));
        // Last: the planner's state is whole before engine code runs (the
        // window's advice after the read: the read's frames are its
        // request's before any engine code runs).
        env.start_read(slot, first, run, &gaps, descending, advise);
        gaps.clear();
        self.gap_frames = gaps;
        if let Some((low, len)) = window {
            if env.advise(low, len) {
                self.stats.backward_readahead += 1;
            }
        }
    }

    /// A descending scan's read-ahead, as the kernel's is for ascending
    /// ones: the kernel reads ahead only above an ascending reader, so a
    /// buffered scan going down a file would read it in requests of one
    /// read each. Once two reads in a row each continue the one before
    /// downwards (each ends right below the first block of the one before;
    /// one such pair in a random order is chance, two in a row hardly), the
    /// window of `backward_readahead` blocks below is advised; the next window is
    /// advised when the scan reaches the lower half of the last one, so
    /// the kernel stays a window ahead, each window once per descent. Only
    /// where advice is taken and the kernel reads ahead (buffered files;
    /// not under [`AdvicePolicy::Never`]), and for a window larger than two
    /// reads. Returns the window to advise (first block, blocks), recording
    /// it as advised.
    fn read_ahead_below(&mut self, first: BlockNumber, n: u64) -> Option<(BlockNumber, u64)> {
        // 0 where no window applies (`Planner::new`).
        let w = self.cfg.backward_readahead;
        if w == 0 {
            return None;
        }
        let below_last = self
            .last_read
            .is_some_and(|(f, _, _)| first.checked_add(n) == Some(f));
        if !below_last {
            // Not a descent: a new one starts its windows afresh.
            self.descent = 0;
            self.advised_low = None;
            return None;
        }
        self.descent = self.descent.saturating_add(1);
        if self.descent < 2 {
            return None;
        }
        let top = match self.advised_low {
            // The last window still reaches half a window below this read.
            Some(low) if low <= first && first - low >= w / 2 => return None,
            // Advised down to `low`, this read at or above it: go on below.
            Some(low) if low <= first => low,
            // The first window of this descent, or the scan overtook it.
            _ => first,
        };
        if top == 0 {
            return None;
        }
        let low = top.saturating_sub(w);
        self.advised_low = Some(low);
        Some((low, top - low))
    }

    /// Makes the head entry ready if it can, starting what it needs.
    pub(crate) fn prepare_head(&mut self, env: &mut impl Env<D>) -> Head {
        if self.handing.is_some() {
            return Head::Ready;
        }
        loop {
            let Some(head) = self.queue.front() else {
                if self.exhausted && self.pending_n == 0 && self.stashed.is_none() {
                    return Head::End;
                }
                self.look_ahead(env);
                if self.queue.is_empty() {
                    if self.exhausted && self.stashed.is_none() {
                        return Head::End;
                    }
                    // Only reachable while our reads are in flight.
                    return Head::WaitRead;
                }
                continue;
            };
            match head.slot {
                Slot::Ready | Slot::Failed(_) => return Head::Ready,
                Slot::Io => return Head::WaitRead,
                Slot::Pending => {
                    if self.ios_in_progress >= self.cfg.max_ios {
                        return Head::WaitRead;
                    }
                    // Let the pending read grow to the distance first, as
                    // look-ahead would have; it may start it itself.
                    self.look_ahead(env);
                    if !matches!(self.queue.front().map(|e| &e.slot), Some(Slot::Pending)) {
                        continue;
                    }
                    let ec = self.eff_combine();
                    if !self.start_pending(env, ec) {
                        if self.ios_in_progress > 0 {
                            return Head::WaitRead;
                        }
                        // Every frame is pinned by others and nothing of ours
                        // will free one: say so. The block stays queued, so
                        // nothing is lost if the caller frees frames and asks
                        // again. (The stream counts the error when it
                        // reports it.)
                        return Head::Exhausted;
                    }
                }
                Slot::Lost(_) => match env.frame_status(head.frame) {
                    // Filled before the read failed.
                    Status::Valid => self.queue[0].slot = Slot::Ready,
                    // Another stream is reading it again.
                    Status::Io => return Head::WaitFrame(head.frame),
                    Status::Empty => {
                        let head = &mut self.queue[0].slot;
                        if let Slot::Lost(err) = std::mem::replace(head, Slot::Ready) {
                            *head = Slot::Failed(err);
                        }
                        return Head::Ready;
                    }
                },
                Slot::Busy | Slot::Retry => {
                    let f = head.frame;
                    let retry = matches!(head.slot, Slot::Retry);
                    match env.frame_status(f) {
                        Status::Valid => self.queue[0].slot = Slot::Ready,
                        Status::Io => return Head::WaitFrame(f),
                        Status::Empty => {
                            // The read we waited for failed or was cancelled
                            // (or was our combined read): read the block
                            // ourselves, alone.
                            if self.ios_in_progress >= self.cfg.max_ios {
                                return Head::WaitRead;
                            }
                            match env.claim_io(f) {
                                Lookup::Read(_) => {
                                    if retry {
                                        self.stats.retries += 1;
                                    }
                                    let slot = *self
                                        .free_ios
                                        .last()
                                        .expect("a free read slot below max_ios");
                                    self.queue[0].slot = Slot::Io;
                                    let gaps = std::mem::take(&mut self.gap_frames);
                                    self.issue(env, slot, 0, vec![f], gaps);
                                    return Head::WaitRead;
                                }
                                Lookup::Hit(_) => self.queue[0].slot = Slot::Ready,
                                Lookup::Busy(_) => return Head::WaitFrame(f),
                            }
                        }
                    }
                }
            }
        }
    }

    /// Takes the ready head entry. Moves the distance (behaviours B and C
    /// of the design document's §2) and looks ahead again.
    pub(crate) fn pop(&mut self, env: &mut impl Env<D>) -> Entry<D> {
        if let Some(e) = self.handing.take() {
            // A hand-out a panic in look-ahead cut short: its turn now.
            return e;
        }
        // Planted bug for the property tests (see plan/tests.rs): hand two
        // ready pages out of order now and then.
        #[cfg(pagestream_mutant = "swap")]
        if self.queue.len() >= 2
            && matches!(self.queue[1].slot, Slot::Ready)
            && self.head_seq % 7 == 3
        {
            self.queue.swap(0, 1);
        }
        let e = self.queue.pop_front().expect("pop of an empty queue");
        self.head_seq += 1;
        if e.holds_pin() {
            self.pinned -= 1;
        }
        if e.read_head {
            self.last_cached = e.cached;
            let cap = self.cap();
            if e.cached {
                let c = self.eff_combine().saturating_mul(self.cfg.cached_depth);
                self.distance = if self.distance > c {
                    self.distance - 1
                } else {
                    (self.distance * 2).min(c).min(cap)
                };
            } else {
                // From the device, or another stream's read: reads are
                // worth combining, and hits must not undo the look-ahead at
                // once. Looking further ahead pays only if the consumer
                // waited for this read or behind it (PostgreSQL 19 asks for
                // a wait for this very read; see `docs/design.md` §6 for
                // why not).
                self.combine_distance = (self.combine_distance * 2).min(self.cfg.combine);
                self.decay_holdoff = cap;
                // Planted bug: PostgreSQL 18's rule, a doubling per read.
                let planted = cfg!(pagestream_mutant = "pg18_growth");
                if self.waited_behind > 0 || planted {
                    self.distance = (self.distance * 2).min(cap);
                }
            }
        }
        self.waited_behind = self.waited_behind.saturating_sub(1);
        let st = &mut self.stats;
        st.pages += 1;
        st.distance_sum += self.distance as u64;
        st.pinned_sum += self.pinned as u64;
        st.max_distance = st.max_distance.max(self.distance as u64);
        if matches!(e.slot, Slot::Failed(_)) {
            st.errors += 1;
        }
        // Look ahead when there is room for a whole read (or nothing is
        // queued), not after every page: a read is then started at full size
        // when it can be, and a scan that needs no new read pays nothing.
        let room = self.distance.saturating_sub(self.queue.len());
        let e = if room >= self.distance.min(self.eff_combine()) || self.pinned == 0 {
            self.handing = Some(e);
            self.look_ahead(env);
            self.handing.take().expect("the entry being handed out")
        } else {
            e
        };
        // The combine distance too: the fast path reads a miss alone, so a
        // stream whose reads come from the device, and which does not wait
        // for them (its distance stays at 1), would else read block by block.
        self.in_fast_path = self.cfg.fast_path
            && self.ios_in_progress == 0
            && self.pinned == 1
            && self.distance == 1
            && self.combine_distance == 1
            && self.pending_n == 0
            && self.stashed.is_none()
            && self.queue.len() == 1
            && matches!(self.queue[0].slot, Slot::Ready);
        e
    }

    /// The fast path: the one ready entry is swapped for the next block if
    /// that is a hit. Returns the entry to hand out; leaves the fast path on
    /// anything else.
    pub(crate) fn fast_pop(&mut self, env: &mut impl Env<D>) -> Entry<D> {
        debug_assert!(self.in_fast_path && self.queue.len() == 1 && self.ios_in_progress == 0);
        match self.pull(env) {
            None => {}
            Some((b, d)) => match env.check_block(b) {
                Err(e) => self.queue.push_back(Entry::failed(b, d, e.into())),
                Ok(()) => match env.lookup(b) {
                    Ok(Lookup::Hit(f)) => {
                        let st = &mut self.stats;
                        st.hits += 1;
                        st.fast_path_pages += 1;
                        st.pages += 1;
                        st.distance_sum += 1;
                        st.pinned_sum += 1;
                        self.head_seq += 1;
                        let mut e = Entry::pending(b, d);
                        e.frame = f;
                        e.slot = Slot::Ready;
                        return std::mem::replace(&mut self.queue[0], e);
                    }
                    Ok(Lookup::Busy(f)) => {
                        let mut e = Entry::pending(b, d);
                        e.frame = f;
                        e.slot = Slot::Busy;
                        self.queue.push_back(e);
                        self.pinned += 1;
                        self.stats.shared_reads += 1;
                    }
                    Ok(Lookup::Read(f)) => {
                        // Off the fast path before the engine runs: if it
                        // panics, the next poll finds two entries queued and
                        // must take the ordinary path.
                        self.in_fast_path = false;
                        let slot = *self.free_ios.last().expect("a free read slot");
                        let mut e = Entry::pending(b, d);
                        e.frame = f;
                        e.slot = Slot::Io;
                        self.queue.push_back(e);
                        self.pinned += 1;
                        let at = self.queue.len() - 1;
                        let gaps = std::mem::take(&mut self.gap_frames);
                        self.issue(env, slot, at, vec![f], gaps);
                    }
                    Err(()) => self.stashed = Some((b, d)),
                },
            },
        }
        self.in_fast_path = false;
        let e = self.pop(env);
        self.stats.fast_path_pages += 1;
        e
    }

    /// A read of ours has ended.
    pub(crate) fn read_done(&mut self, slot: u32, result: Result<bool, io::Error>) {
        let Some(info) = self.ios[slot as usize].take() else {
            debug_assert!(false, "completion for an idle slot");
            return;
        };
        self.free_ios.push(slot);
        self.ios_in_progress -= 1;
        self.gaps_in_flight -= info.gaps;
        if info.orphan {
            return;
        }
        let base = (info.first_seq - self.head_seq) as usize;
        match result {
            Ok(cached) => {
                if cached {
                    self.stats.cached_reads += 1;
                }
                for e in self.queue.range_mut(base..base + info.n) {
                    e.slot = Slot::Ready;
                    e.cached = cached;
                }
            }
            // A read of one entry reads no hole (a hole lies between two
            // of a read's entries).
            Err(err) if info.n == 1 => {
                self.queue[base].slot = Slot::Failed(err);
            }
            Err(err) if !self.cfg.retry_blocks => {
                for e in self.queue.range_mut(base..base + info.n) {
                    e.slot = Slot::Lost(error_for_block(&err, e.block));
                    e.read_head = false;
                }
            }
            Err(_) => {
                for e in self.queue.range_mut(base..base + info.n) {
                    e.slot = Slot::Retry;
                    e.read_head = false;
                }
            }
        }
    }

    /// Drops all look-ahead (unpinning everything queued) and forgets the
    /// end of the source. Reads in flight finish on their own; their slots
    /// stay taken until they report.
    ///
    /// Dropping the entries' data runs user code, which may panic: it runs
    /// last, once every pin is released and the planner is a fresh one's
    /// (reads in flight orphaned), so a panic there leaves a planner that
    /// goes on correctly from the next source.
    pub(crate) fn reset(&mut self, env: &mut impl Env<D>) {
        // Planted bug: leak the first pin.
        #[cfg(pagestream_mutant = "leak_pin")]
        if let Some(e) = self.queue.iter_mut().find(|e| e.frame != NO_FRAME) {
            e.frame = NO_FRAME;
        }
        for e in self.queue.iter_mut().chain(self.handing.as_mut()) {
            if e.frame != NO_FRAME {
                env.unpin(std::mem::replace(&mut e.frame, NO_FRAME));
            }
        }
        let mut queue = std::mem::take(&mut self.queue);
        let handing = self.handing.take();
        let stashed = self.stashed.take();
        self.pinned = 0;
        self.pending_n = 0;
        // The entries' sequence numbers are gone with them: a read of theirs
        // still in flight must not mark the entries that take those numbers.
        for io in self.ios.iter_mut().flatten() {
            io.orphan = true;
        }
        self.dir = Dir::One;
        self.exhausted = false;
        self.in_fast_path = false;
        self.last_read = None;
        self.descent = 0;
        self.advised_low = None;
        self.distance = self.cfg.start_distance();
        self.combine_distance = self.distance;
        self.decay_holdoff = 0;
        self.waited_behind = 0;
        self.last_cached = false;
        // Last: the user's data.
        drop(stashed);
        drop(handing);
        queue.clear();
        // Keep the queue's allocation (nothing was queued meanwhile).
        self.queue = queue;
    }
}

/// `err`, the error of a read that covered `block`, as that block's: the
/// engine's words under the block's number.
fn error_for_block(err: &io::Error, block: BlockNumber) -> io::Error {
    let read = err.get_ref().and_then(|e| e.downcast_ref::<ReadError>());
    match read {
        Some(ReadError::Io { source, .. }) => ReadError::Io {
            block,
            source: io::Error::new(source.kind(), source.to_string()),
        }
        .into(),
        Some(ReadError::Cancelled { .. }) => ReadError::Cancelled { block }.into(),
        _ => io::Error::new(err.kind(), err.to_string()),
    }
}
