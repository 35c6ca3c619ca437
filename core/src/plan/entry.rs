//! One look-ahead queue entry and the state it is in.

use crate::BlockNumber;
use std::io;

/// Marks an entry that holds no frame.
pub(crate) const NO_FRAME: u32 = u32::MAX;

/// Where a queued block stands.
#[derive(Debug)]
pub(crate) enum Slot {
    /// Part of the pending read: not looked up, nothing pinned.
    Pending,
    /// Pinned and valid: can be handed out.
    Ready,
    /// Pinned; this stream's read in slot `.0` will fill it.
    Io,
    /// Pinned; another stream is reading it (or read it and failed): check
    /// the frame's status when this entry reaches the head.
    Busy,
    /// Pinned; this stream's combined read covering it failed or was
    /// cancelled: re-read alone when it reaches the head.
    Retry,
    /// Pinned; this stream's read covering it failed as a whole (see
    /// [`crate::EngineHints::retry_blocks`]): handed out as this error when
    /// it reaches the head, unless the read had filled its frame before it
    /// failed.
    Lost(io::Error),
    /// To be handed out as an error.
    Failed(io::Error),
}

/// A block in the look-ahead queue, in source order.
#[derive(Debug)]
pub(crate) struct Entry<D> {
    pub(crate) block: BlockNumber,
    pub(crate) data: D,
    /// The pinned frame, or [`NO_FRAME`].
    pub(crate) frame: u32,
    pub(crate) slot: Slot,
    /// First entry (in queue order) of a read this stream started: taking
    /// it moves the distance.
    pub(crate) read_head: bool,
    /// The read that filled it was served from the OS page cache.
    pub(crate) cached: bool,
}

impl<D> Entry<D> {
    pub(crate) fn pending(block: BlockNumber, data: D) -> Self {
        Entry {
            block,
            data,
            frame: NO_FRAME,
            slot: Slot::Pending,
            read_head: false,
            cached: false,
        }
    }

    pub(crate) fn failed(block: BlockNumber, data: D, err: io::Error) -> Self {
        Entry {
            block,
            data,
            frame: NO_FRAME,
            slot: Slot::Failed(err),
            read_head: false,
            cached: false,
        }
    }

    pub(crate) fn holds_pin(&self) -> bool {
        self.frame != NO_FRAME
    }
}
