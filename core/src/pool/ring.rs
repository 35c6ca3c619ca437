//! Rings: a bounded set of frames one stream recycles (PostgreSQL's BULKREAD
//! buffer access strategy), so a large scan cannot flush the shared pool and
//! a warm scan's working set of destination memory stays inside the CPU
//! cache.
//!
//! A ring never caps look-ahead: when its next slot is still pinned (or was
//! used again by someone else), the stream takes a frame from the clock sweep
//! and puts it into the slot instead, exactly as PostgreSQL does. So a ring
//! smaller than a stream's pin budget costs cache footprint, never depth.

const EMPTY_SLOT: u32 = u32::MAX;

/// How large a stream's ring is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RingSize {
    /// This many frames.
    Frames(usize),
    /// Enough frames for this many bytes.
    Bytes(usize),
}

impl RingSize {
    /// PostgreSQL's BULKREAD ring: 256 KiB.
    pub const BULKREAD: RingSize = RingSize::Bytes(256 * 1024);

    pub(crate) fn frames(self, block_size: usize) -> usize {
        match self {
            RingSize::Frames(n) => n,
            RingSize::Bytes(b) => b.div_ceil(block_size),
        }
        .max(1)
    }
}

/// One stream's ring of frame numbers.
#[derive(Debug)]
pub(crate) struct Ring {
    slots: Box<[u32]>,
    pos: usize,
}

impl Ring {
    pub(crate) fn new(frames: usize) -> Self {
        Ring {
            slots: vec![EMPTY_SLOT; frames.max(1)].into_boxed_slice(),
            pos: 0,
        }
    }

    /// The frame in the current slot, if the slot has been filled.
    pub(crate) fn current(&self) -> Option<u32> {
        let f = self.slots[self.pos];
        (f != EMPTY_SLOT).then_some(f)
    }

    /// Moves to the next slot.
    pub(crate) fn advance(&mut self) {
        self.pos += 1;
        if self.pos == self.slots.len() {
            self.pos = 0;
        }
    }

    /// Puts `f` into the current slot and moves on.
    pub(crate) fn replace(&mut self, f: u32) {
        self.slots[self.pos] = f;
        self.advance();
    }
}
