//! Rings: a bounded set of frames one stream recycles (PostgreSQL's BULKREAD
//! buffer access strategy), so a large scan cannot flush the shared pool.
//!
//! A ring never caps look-ahead: when its next slot is still pinned (or was
//! used again by someone else), the stream takes a frame from the clock
//! sweep. PostgreSQL then puts that frame in the slot instead, and the
//! pinned one leaves the ring; a scan whose look-ahead is deeper than its
//! ring would so cycle through the whole pool. Here the ring *grows*
//! instead, one read's worth of frames (`io_combine_limit`) at a time, up to
//! the stream's pin budget plus one read, so a deep scan recycles its own
//! frames too. It grows by a block of frames the sweep finds together,
//! usually adjacent in memory, so runs of slots stay runs of adjacent
//! frames and a read's frames reach the engine as one buffer: slots added
//! one at a time would interleave frames, make reads vectored and let the
//! device merge less.
//!
//! [`RingSize::BULKREAD`] starts where PostgreSQL 18 sizes its BULKREAD
//! ring: 256 KiB plus room for `max_ios` reads of `io_combine_limit`
//! blocks, which is about the most a stream's look-ahead pins, so it seldom
//! grows.
//!
//! A stream whose reads come from the OS page cache has its ring cycle
//! through only as many slots as its look-ahead can pin now (its distance
//! plus one read, in whole reads: the *window*), which it sets at each
//! look-ahead. Such a scan keeps about one read ahead, and its reads are
//! copies into the frames: through the whole ring it would write 2.25 MiB
//! of frames round and round, which the CPU's caches no longer hold when
//! they are written again; through its window it reuses two reads' worth
//! (256 KiB at the defaults). A stream that waits for its reads keeps the
//! whole ring: its look-ahead ramps up to fill it, and a window moving
//! with the distance would split its reads across frames the ring took
//! from the sweep at different times (vectored reads, which O_DIRECT with
//! registered buffers cannot make fixed-buffer reads). A frame the ring
//! cannot reuse when it comes round to it (still pinned: the consumer holds
//! more pages than the window allows for; or used again by someone else)
//! widens the window read by read, up to the whole ring, before the ring
//! takes a frame from the sweep or grows; the widened window is the least
//! until laps of it find nothing busy, then comes down a read per lap. The
//! measurements behind these choices are in `docs/engines.md`.

const EMPTY_SLOT: u32 = u32::MAX;

/// How large a stream's ring is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RingSize {
    /// This many frames.
    Frames(usize),
    /// Enough frames for this many bytes.
    Bytes(usize),
    /// 256 KiB plus `max_ios` reads of `io_combine_limit` blocks
    /// (PostgreSQL 18's BULKREAD ring), [`RingSize::BULKREAD`].
    BulkRead,
}

impl RingSize {
    /// PostgreSQL 18's BULKREAD ring: 256 KiB plus room for the stream's
    /// `max_ios` reads of `io_combine_limit` blocks (2.25 MiB at the
    /// defaults and 8 KiB blocks), but no more than the stream's pin budget
    /// plus one read (the most its look-ahead can pin), never less than
    /// 256 KiB, and at most the pool. `RingSize::Bytes(256 * 1024)` is
    /// PostgreSQL 16's.
    pub const BULKREAD: RingSize = RingSize::BulkRead;

    /// Frames the ring starts with, for a stream of `block_size` blocks
    /// that keeps up to `max_ios` reads of `combine` blocks in flight and
    /// whose ring may grow to `max_len` frames, in a pool of `nframes`.
    fn frames(
        self,
        block_size: usize,
        max_ios: usize,
        combine: usize,
        max_len: usize,
        nframes: usize,
    ) -> usize {
        let bytes = |b: usize| b.div_ceil(block_size);
        match self {
            RingSize::Frames(n) => n,
            RingSize::Bytes(b) => bytes(b),
            // Room for the look-ahead, but no more than it can pin, and
            // never under PostgreSQL 16's 256 KiB.
            RingSize::BulkRead => (bytes(256 * 1024) + max_ios * combine)
                .min(max_len)
                .max(bytes(256 * 1024)),
        }
        .min(nframes)
        .max(1)
    }
}

/// One stream's ring of frame numbers.
///
/// It cycles through its first `window` slots only (the module docs say
/// why). The slots past the window keep their frames (no longer cycled
/// through; the clock sweep may take them once they are unpinned) for when
/// the look-ahead, or the consumer, needs more.
#[derive(Debug)]
pub(crate) struct Ring {
    slots: Vec<u32>,
    pos: usize,
    /// Slots in use (`1..=slots.len()`).
    window: usize,
    /// The least window: raised by [`widen`](Ring::widen) (the consumer
    /// holds frames beyond what look-ahead pins), lowered by a read's worth
    /// after each lap of the window that found no frame busy.
    floor: usize,
    /// Whether this lap of the window found a frame busy.
    busy_in_lap: bool,
    /// Most slots it may grow to.
    max_len: usize,
    /// Slots it grows by at most at a time: one read's worth.
    step: usize,
    /// Reuses not yet added to the pool's counter.
    reuses: u64,
    /// Of those, reuses that evicted a valid block.
    evictions: u64,
}

impl Ring {
    /// A ring of `frames` slots that may grow to `max_len`, `step` slots
    /// (a read's worth of frames) at a time.
    pub(crate) fn new(frames: usize, max_len: usize, step: usize) -> Self {
        let frames = frames.max(1);
        Ring {
            slots: vec![EMPTY_SLOT; frames],
            pos: 0,
            window: frames,
            floor: 0,
            busy_in_lap: false,
            max_len: max_len.max(frames),
            step: step.max(1),
            reuses: 0,
            evictions: 0,
        }
    }

    /// The ring of a stream that keeps up to `max_ios` reads of `combine`
    /// blocks of `block_size` in flight, in a pool of `nframes`: `size`
    /// frames to start with, growing to at most the stream's pin budget
    /// plus one read.
    pub(crate) fn for_stream(
        size: RingSize,
        block_size: usize,
        max_ios: usize,
        combine: usize,
        nframes: usize,
    ) -> Self {
        let max_len = ((max_ios + 1) * combine + combine).min(nframes);
        Ring::new(
            size.frames(block_size, max_ios, combine, max_len, nframes),
            max_len,
            combine,
        )
    }

    /// Reuses counted locally before they are added to the pool's counters.
    pub(crate) const FLUSH_EVERY: u64 = 64;

    /// Counts a reuse of the current slot's frame (`evicted`: it held a
    /// valid block); true when the counts should be flushed to the pool.
    #[inline]
    pub(crate) fn count_reuse(&mut self, evicted: bool) -> bool {
        self.reuses += 1;
        self.evictions += u64::from(evicted);
        self.reuses >= Self::FLUSH_EVERY
    }

    /// Takes the counts not yet flushed: `(reuses, evictions)`.
    pub(crate) fn take_counts(&mut self) -> (u64, u64) {
        let c = (self.reuses, self.evictions);
        self.reuses = 0;
        self.evictions = 0;
        c
    }

    /// The frame in the current slot, if the slot has been filled.
    pub(crate) fn current(&self) -> Option<u32> {
        let f = self.slots[self.pos];
        (f != EMPTY_SLOT).then_some(f)
    }

    /// Moves to the next slot.
    pub(crate) fn advance(&mut self) {
        self.pos += 1;
        if self.pos >= self.window {
            self.pos = 0;
            if !self.busy_in_lap {
                self.floor = self.floor.saturating_sub(self.step);
            }
            self.busy_in_lap = false;
        }
    }

    /// Cycles through `frames` slots from now on (rounded up to whole reads,
    /// at least one read's worth and the window's floor, at most every
    /// slot): the most the stream's look-ahead can pin now, plus the read it
    /// is putting together. A frame still pinned when the ring comes round
    /// to it (the consumer holds more pages) widens the window
    /// ([`widen`](Self::widen)), and the widened window stays the least
    /// until laps of it find nothing busy.
    pub(crate) fn set_window(&mut self, frames: usize) {
        let w = frames
            .max(self.floor)
            .min(self.slots.len())
            .next_multiple_of(self.step)
            .max(self.step)
            .min(self.slots.len());
        self.window = w;
        if self.pos >= w {
            self.pos = 0;
        }
    }

    /// Takes one more read's worth of slots into the window, if it leaves
    /// any out, and moves to the first of them; false if it was all in.
    /// The current slot's frame was found busy: the new window is also the
    /// least from now on, until a lap finds nothing busy.
    pub(crate) fn widen(&mut self) -> bool {
        self.busy_in_lap = true;
        if self.window == self.slots.len() {
            return false;
        }
        self.pos = self.window;
        self.window = (self.window + self.step).min(self.slots.len());
        self.floor = self.window;
        true
    }

    /// How many slots to add now: when the current slot holds a frame that
    /// is busy (the caller found it so), every slot is in the window, and
    /// the ring may grow, one read's worth, up to its limit; else none.
    pub(crate) fn growth_wanted(&self) -> usize {
        if self.slots[self.pos] == EMPTY_SLOT || self.window < self.slots.len() {
            return 0;
        }
        self.step.min(self.max_len - self.slots.len())
    }

    /// Puts `f`, a frame from the clock sweep, into the current slot (empty,
    /// or holding a busy frame the ring gives up, as PostgreSQL does) and
    /// moves on.
    pub(crate) fn add(&mut self, f: u32) {
        self.slots[self.pos] = f;
        self.advance();
    }

    /// Inserts `block` (frames from the sweep, the first one in use now) as
    /// new slots before the current one, and moves past the first.
    pub(crate) fn insert_block(&mut self, block: &[u32]) {
        self.slots.splice(self.pos..self.pos, block.iter().copied());
        self.window += block.len();
        self.advance();
    }

    /// Slots now.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Slots the ring cycles through now.
    #[cfg(test)]
    pub(crate) fn window(&self) -> usize {
        self.window
    }
}
