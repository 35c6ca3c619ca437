//! The frame header and its packed state word.
//!
//! Every frame has one cache-line-aligned header whose `state` word carries
//! everything the hit path needs in one atomic, so pin and unpin are a single
//! CAS / `fetch_sub` on a line no other frame shares:
//!
//! ```text
//!  63                              32 31 30 29  27 26      25  24 23            0
//! +----------------------------------+-----+------+---------+------+-------------+
//! |            generation            |  -  | usage| WAITERS |status|  pin count  |
//! +----------------------------------+-----+------+---------+------+-------------+
//!   status:     0 EMPTY (no valid bytes), 1 IO (a read owns the bytes), 2 VALID
//!   usage:      clock-sweep usage count, 0..=MAX_USAGE
//!   WAITERS:    some task waits in the pool's waiter table for this frame's I/O
//!   generation: bumped every time the frame is taken for another block
//! ```
//!
//! A block table slot (see `table.rs`) names a frame *and* the generation it
//! was installed with. A lookup pins with one CAS that also requires the
//! generation to match, so a slot left stale by an eviction can never pin a
//! frame that now holds another block: evictors never have to find and
//! clear the old slot, and the hit path takes no lock at all.
//!
//! Rules (each relied on by a `// SAFETY:` comment elsewhere):
//! 1. A frame's bytes are written only by the holder of its IO status (one
//!    `ReadRequest`), and read only through a pin while the status is VALID.
//! 2. Status leaves IO only through `PoolInner::finish_io`, called once by
//!    the request that owns the IO status.
//! 3. A frame is taken for another block only by a CAS from
//!    `pins == 0 && status != IO` to `pins = 1, EMPTY, generation + 1`; so no
//!    pinned frame is ever reassigned, and every stale slot stops matching.
//! 4. The tag (`file`, `block`) is written only by the holder of that claim
//!    pin, before the frame is published in a slot.
//! 5. Nothing but the pin count's owners changes the pin count, and the
//!    state word is only ever changed by a CAS or an atomic add: after 2^32
//!    claims of a frame a stale slot names its generation again, so a
//!    lookup through that slot may pin even a claimed, unpublished frame (to
//!    check its tag and unpin) at any moment. A plain store would drop that
//!    pin, and its unpin would then take the claim's.

use crate::sync::{AtomicU64, Ordering};

pub(crate) const PIN_MASK: u64 = 0xFF_FFFF;
pub(crate) const STATUS_SHIFT: u32 = 24;
pub(crate) const STATUS_MASK: u64 = 0b11 << STATUS_SHIFT;
pub(crate) const WAITERS: u64 = 1 << 26;
pub(crate) const USAGE_SHIFT: u32 = 27;
pub(crate) const USAGE_MASK: u64 = 0b111 << USAGE_SHIFT;
pub(crate) const USAGE_ONE: u64 = 1 << USAGE_SHIFT;
pub(crate) const GEN_SHIFT: u32 = 32;
/// PostgreSQL's BM_MAX_USAGE_COUNT.
pub(crate) const MAX_USAGE: u64 = 5;

/// No file: the frame holds no block. (File tags count up from 0, one per
/// file table the pool creates, so no table ever has this tag.)
pub(crate) const NO_FILE: u64 = u64::MAX;

/// A frame's status (bits 24..26 of the state word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// No valid bytes; whoever pins it may start a read (`try_start_io`).
    Empty,
    /// A read owns the bytes.
    Io,
    /// The bytes are the block named by the tag.
    Valid,
}

impl Status {
    pub(crate) const fn bits(self) -> u64 {
        (match self {
            Status::Empty => 0u64,
            Status::Io => 1,
            Status::Valid => 2,
        }) << STATUS_SHIFT
    }
}

#[inline]
pub(crate) fn pins(s: u64) -> u64 {
    s & PIN_MASK
}

#[inline]
pub(crate) fn status(s: u64) -> Status {
    match (s & STATUS_MASK) >> STATUS_SHIFT {
        0 => Status::Empty,
        1 => Status::Io,
        _ => Status::Valid,
    }
}

#[inline]
pub(crate) fn usage(s: u64) -> u64 {
    (s & USAGE_MASK) >> USAGE_SHIFT
}

#[inline]
pub(crate) fn gen(s: u64) -> u32 {
    (s >> GEN_SHIFT) as u32
}

#[inline]
pub(crate) fn with_status(s: u64, st: Status) -> u64 {
    (s & !STATUS_MASK) | st.bits()
}

/// A state word: generation `g`, one pin (the claim), status `st`.
#[inline]
pub(crate) fn claimed(g: u32, st: Status) -> u64 {
    (u64::from(g) << GEN_SHIFT) | st.bits() | 1
}

/// What [`FrameHeader::pin_if_gen`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PinIf {
    /// Pinned; the state word the pin made.
    Pinned(u64),
    /// The frame has moved on to another generation.
    Stale,
    /// The frame has `PIN_MASK` pins already (16.7 million).
    Full,
}

/// One frame's metadata, alone on its cache line so that two threads pinning
/// neighbouring frames do not bounce a shared line.
#[repr(align(64))]
#[derive(Debug)]
pub(crate) struct FrameHeader {
    /// The packed state word above.
    pub(crate) state: AtomicU64,
    /// Tag: the file this frame holds a block of, as the pool-local tag of
    /// the file's table (`table.rs`, `FileTable::tag`; one word, unique per
    /// file in this pool), or [`NO_FILE`].
    pub(crate) file: AtomicU64,
    /// Tag: the block (meaningless with `NO_FILE`).
    pub(crate) block: AtomicU64,
}

impl FrameHeader {
    pub(crate) fn new() -> Self {
        FrameHeader {
            state: AtomicU64::new(0),
            file: AtomicU64::new(NO_FILE),
            block: AtomicU64::new(0),
        }
    }

    /// Adds a pin and bumps the usage count if the frame is still at
    /// generation `g` and has room for another pin.
    #[inline]
    pub(crate) fn pin_if_gen(&self, g: u32) -> PinIf {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if gen(s) != g {
                return PinIf::Stale;
            }
            if pins(s) == PIN_MASK {
                // One more would carry into the status bits.
                return PinIf::Full;
            }
            let mut n = s + 1;
            if usage(s) < MAX_USAGE {
                n += USAGE_ONE;
            }
            match self
                .state
                .compare_exchange_weak(s, n, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return PinIf::Pinned(n),
                Err(cur) => s = cur,
            }
        }
    }

    /// Drops a pin.
    #[inline]
    pub(crate) fn unpin(&self) {
        let prev = self.state.fetch_sub(1, Ordering::Release);
        debug_assert!(pins(prev) > 0, "unpin of an unpinned frame");
    }

    /// Moves a pinned EMPTY frame to IO. Returns the status seen if the CAS
    /// could not be made because the status was not EMPTY.
    #[inline]
    pub(crate) fn try_start_io(&self) -> Result<(), Status> {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            debug_assert!(pins(s) > 0, "start_io on an unpinned frame");
            if status(s) != Status::Empty {
                return Err(status(s));
            }
            let n = with_status(s, Status::Io);
            match self
                .state
                .compare_exchange_weak(s, n, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(cur) => s = cur,
            }
        }
    }

    /// The claim holder's step from a claimed EMPTY frame to IO, usage one,
    /// just before it publishes the frame for a read. Keeps every pin
    /// (rule 5). Fails with the status seen if it is no longer EMPTY: a
    /// lookup through a stale slot naming this generation *and* the block
    /// just written to the tag has started the read itself.
    #[inline]
    pub(crate) fn claimed_to_io(&self) -> Result<(), Status> {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            debug_assert!(pins(s) > 0);
            if status(s) != Status::Empty {
                return Err(status(s));
            }
            let n = (with_status(s, Status::Io) & !USAGE_MASK) | USAGE_ONE;
            // Release: the tag written before is visible with the status.
            match self
                .state
                .compare_exchange_weak(s, n, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(cur) => s = cur,
            }
        }
    }

    /// Drops the claim pin of a claimed, unpublished frame and clears its
    /// usage: it is free again, at the same generation, once no one else
    /// pins it. Keeps every other pin and the status (rule 5: a lookup
    /// through a stale slot may hold a pin, or even a read it started).
    #[inline]
    pub(crate) fn release_claim(&self) {
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            debug_assert!(pins(s) > 0);
            let n = (s & !USAGE_MASK) - 1;
            match self
                .state
                .compare_exchange_weak(s, n, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(cur) => s = cur,
            }
        }
    }

    /// Sets the generation, as `2^32 - k` claims would have (tests only).
    #[cfg(test)]
    pub(crate) fn set_gen(&self, g: u32) {
        let s = self.state.load(Ordering::Relaxed);
        self.state.store(
            (s & ((1 << GEN_SHIFT) - 1)) | (u64::from(g) << GEN_SHIFT),
            Ordering::SeqCst,
        );
    }

    #[inline]
    pub(crate) fn load(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }
}
