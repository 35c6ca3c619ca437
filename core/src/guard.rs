//! [`PageGuard`]: one pinned page handed out by a stream.

use crate::stream::StreamShared;
use crate::sync::Arc;
use crate::BlockNumber;
use std::fmt;
use std::ops::Deref;
use std::ptr::NonNull;

/// A pinned page: derefs to the block's bytes (the block size, or fewer for
/// a short last page, see
/// [`StreamBuilder::short_last_page`](crate::StreamBuilder::short_last_page)),
/// knows its block number and carries the source's per-block data. Dropping it unpins the frame. It may
/// outlive the stream (and every pool handle): it keeps the pool alive.
///
/// While a guard exists its frame cannot be evicted or written, so the bytes
/// are stable; many guards (from many streams) may share one frame.
pub struct PageGuard<D = ()> {
    /// Per-stream handle that owns an `Arc` of the pool. Cloning this rather
    /// than the pool's own `Arc` keeps two threads' hit paths off one
    /// reference count.
    shared: Arc<StreamShared>,
    /// Start of the frame's bytes (cached to avoid two pointer hops).
    ptr: NonNull<u8>,
    /// Bytes of the page: the block size, or a short last page's length.
    len: usize,
    frame: u32,
    block: BlockNumber,
    data: D,
}

// SAFETY: the guard's pin keeps the frame VALID and unwritten (frame.rs rule
// 1) for its whole life, so its bytes are shared immutable memory, readable
// from any thread; the other fields are Send when `D` is.
unsafe impl<D: Send> Send for PageGuard<D> {}
// SAFETY: `&PageGuard` only gives `&[u8]` of immutable bytes and `&D`.
unsafe impl<D: Sync> Sync for PageGuard<D> {}

impl<D> PageGuard<D> {
    pub(crate) fn new(shared: Arc<StreamShared>, frame: u32, block: BlockNumber, data: D) -> Self {
        let ptr = shared.pool.frame_ptr(frame);
        let len = if block == shared.short_block {
            shared.short_len
        } else {
            shared.pool.block_size
        };
        PageGuard {
            // SAFETY: frame pointers are inside a non-null allocation.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            len,
            shared,
            frame,
            block,
            data,
        }
    }

    /// The block number.
    #[inline]
    pub fn block(&self) -> BlockNumber {
        self.block
    }

    /// The per-block user data from the block source.
    #[inline]
    pub fn data(&self) -> &D {
        &self.data
    }

    /// Mutable access to the per-block user data.
    #[inline]
    pub fn data_mut(&mut self) -> &mut D {
        &mut self.data
    }

    /// The frame number in the pool (for diagnostics).
    #[inline]
    pub fn frame(&self) -> u32 {
        self.frame
    }
}

impl<D> Deref for PageGuard<D> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points at `block_size` bytes of the pool's memory,
        // kept alive by `shared`'s Arc of the pool, and `len <= block_size`;
        // our pin keeps them VALID and unwritten (frame.rs rule 1) until
        // `drop`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<D> AsRef<[u8]> for PageGuard<D> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl<D> Drop for PageGuard<D> {
    #[inline]
    fn drop(&mut self) {
        self.shared.pool.unpin(self.frame);
    }
}

impl<D: fmt::Debug> fmt::Debug for PageGuard<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageGuard")
            .field("block", &self.block)
            .field("frame", &self.frame)
            .field("data", &self.data)
            .finish()
    }
}
