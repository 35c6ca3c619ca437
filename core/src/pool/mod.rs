//! The shared buffer pool: frames, block tables, pins, clock-sweep eviction,
//! rings, and the I/O-in-progress hand-off.
//!
//! A [`BufferPool`] is a cheap handle (`Arc`) to a fixed set of `block_size`
//! frames in one 4096-aligned allocation. Every stream built on it shares its
//! frames: a block read by one stream is a hit for the next, and a block one
//! stream is reading is *waited for* by a second, never read twice.
//!
//! See `frame.rs` for the state word and the rules that make the frame bytes
//! safe to hand out, `table.rs` for the lock-free block tables and
//! `waiters.rs` for the wake-up hand-off.

mod frame;
#[cfg(all(test, pagestream_loom))]
mod loom_tests;
mod ring;
mod table;
#[cfg(all(test, not(pagestream_loom)))]
mod tests;
mod waiters;
mod watchers;

pub use ring::RingSize;

pub(crate) use frame::Status;
pub(crate) use ring::Ring;
pub(crate) use table::FileView;

use crate::error::BuildError;
use crate::stats::{PoolStats, StreamStats};
use crate::sync::{lock, Arc, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::{BlockNumber, FileId};
use frame::{FrameHeader, PinIf, NO_FILE};
use std::alloc::{self, Layout};
use std::collections::HashMap;
use std::fmt;
use std::ptr::NonNull;
use std::task::Waker;
use table::{FileTable, EMPTY_SLOT};
use waiters::Waiters;
pub(crate) use watchers::Watchers;

/// Alignment of the pool's memory: every frame is aligned to
/// `min(block_size, FRAME_ALIGN)`, enough for O_DIRECT with block sizes of
/// 4096 and up.
pub const FRAME_ALIGN: usize = 4096;

/// Smallest block size.
pub const MIN_BLOCK_SIZE: usize = 512;

/// Largest pool, in frames (frame numbers are `u32`).
pub const MAX_FRAMES: usize = (u32::MAX - 1) as usize;

/// Default block size, PostgreSQL's `BLCKSZ`.
pub const DEFAULT_BLOCK_SIZE: usize = 8192;

/// Checks a block size: a power of two of at least [`MIN_BLOCK_SIZE`].
pub fn check_block_size(block_size: usize) -> Result<(), BuildError> {
    if block_size < MIN_BLOCK_SIZE || !block_size.is_power_of_two() {
        return Err(BuildError::BlockSize { block_size });
    }
    Ok(())
}

/// What the pool answered for one block. Every variant holds a pin on the
/// frame that the caller must eventually drop with [`PoolInner::unpin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The frame holds the block (VALID).
    Hit(u32),
    /// The caller now owns the frame's IO status and must read the block.
    Read(u32),
    /// Someone else is reading the block into the frame; wait for it.
    Busy(u32),
}

/// Why the pool could not produce a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exhausted;

/// A handle on a shared buffer pool. Clone it freely: clones share frames.
///
/// ```
/// use pagestream::BufferPool;
/// let pool = BufferPool::builder().frames(128).block_size(8192).build()?;
/// assert_eq!(pool.frames(), 128);
/// assert_eq!(pool.capacity_bytes(), 1 << 20);
/// # Ok::<(), pagestream::BuildError>(())
/// ```
#[derive(Clone)]
pub struct BufferPool {
    pub(crate) inner: Arc<PoolInner>,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("frames", &self.inner.nframes)
            .field("block_size", &self.inner.block_size)
            .finish_non_exhaustive()
    }
}

/// Builds a [`BufferPool`].
#[derive(Debug, Clone)]
#[must_use]
pub struct PoolBuilder {
    frames: usize,
    block_size: usize,
    prefault: bool,
}

impl PoolBuilder {
    /// Number of frames (default 1024).
    pub fn frames(mut self, frames: usize) -> Self {
        self.frames = frames;
        self
    }

    /// Frames enough for `bytes` (rounded up) at the current block size.
    pub fn capacity_bytes(mut self, bytes: u64) -> Self {
        let bs = self.block_size.max(1) as u64;
        self.frames = bytes.div_ceil(bs).min(MAX_FRAMES as u64 + 1) as usize;
        self
    }

    /// Block (and frame) size in bytes: a power of two ≥ 512. Default 8192.
    pub fn block_size(mut self, block_size: usize) -> Self {
        self.block_size = block_size;
        self
    }

    /// Map every page of frame memory when the pool is built (default
    /// off: the OS maps each page, zeroed, the first time a read fills it).
    ///
    /// A first fill costs a page fault and a page clear inside the read
    /// that fills it — for a fresh 16384-frame pool about 8 µs of a 145 µs
    /// O_DIRECT read, and most of a cached read's copy. A long-lived pool
    /// pays that once; a program that builds a pool per scan and times it
    /// (a benchmark) wants it paid here instead. Costs about 0.55 ms per MiB
    /// of pool on the calling thread.
    ///
    /// ```
    /// use pagestream::BufferPool;
    /// let pool = BufferPool::builder().frames(64).prefault(true).build()?;
    /// assert_eq!(pool.frames(), 64);
    /// # Ok::<(), pagestream::BuildError>(())
    /// ```
    pub fn prefault(mut self, on: bool) -> Self {
        self.prefault = on;
        self
    }

    /// Allocates the pool. Frame memory is zeroed lazily by the OS, unless
    /// [`prefault`](Self::prefault) maps it now.
    pub fn build(self) -> Result<BufferPool, BuildError> {
        check_block_size(self.block_size)?;
        if self.frames == 0 {
            return Err(BuildError::Zero {
                what: "pool frames",
            });
        }
        if self.frames > MAX_FRAMES {
            return Err(BuildError::TooLarge {
                what: "pool frames",
                value: self.frames,
                max: MAX_FRAMES,
            });
        }
        let oom = BuildError::OutOfMemory {
            frames: self.frames,
            bytes: self.frames.saturating_mul(self.block_size),
        };
        let bytes = self
            .frames
            .checked_mul(self.block_size)
            .ok_or_else(|| oom_clone(&oom))?;
        // Allocate with the allocator's natural alignment and align by hand:
        // a zeroed allocation at alignment ≤ 16 is `calloc`, which for large
        // sizes maps fresh zero pages lazily, where a 4096-aligned one would
        // be `posix_memalign` plus a memset of the whole pool up front.
        let padded = bytes
            .checked_add(FRAME_ALIGN)
            .ok_or_else(|| oom_clone(&oom))?;
        let layout = Layout::from_size_align(padded, 16).map_err(|_| oom_clone(&oom))?;
        // SAFETY: `layout` has a non-zero size (frames ≥ 1, block_size ≥ 512).
        let base = unsafe { alloc::alloc_zeroed(layout) };
        let base = NonNull::new(base).ok_or(oom)?;
        let pad = base.as_ptr().align_offset(FRAME_ALIGN);
        debug_assert!(pad < FRAME_ALIGN);
        // SAFETY: `pad < FRAME_ALIGN`, and the allocation has `FRAME_ALIGN`
        // bytes beyond the `bytes` the frames use, so `base + pad` and the
        // `bytes` after it are inside it.
        let memory = unsafe { NonNull::new_unchecked(base.as_ptr().add(pad)) };
        if self.prefault {
            // One write per 4 KiB page maps it (the smallest page size
            // Linux uses; a larger one is mapped by its first write).
            for off in (0..bytes).step_by(4096) {
                // SAFETY: `off < bytes`, so `memory + off` is inside the
                // allocation (see above); nothing else can reference the
                // memory yet, and writing the zero it already holds changes
                // no frame's contents.
                unsafe { std::ptr::write_volatile(memory.as_ptr().add(off), 0) };
            }
        }
        Ok(BufferPool {
            inner: Arc::new(PoolInner {
                base,
                memory,
                layout,
                block_size: self.block_size,
                block_shift: self.block_size.trailing_zeros(),
                nframes: self.frames,
                headers: (0..self.frames).map(|_| FrameHeader::new()).collect(),
                files: Mutex::new(HashMap::new()),
                hand: AtomicU64::new(0),
                waiters: Waiters::new(),
                watchers: Watchers::default(),
                reserved: AtomicUsize::new(0),
                streams: AtomicUsize::new(0),
                share: AtomicUsize::new(self.frames),
                evictions: AtomicU64::new(0),
                ring_reuses: AtomicU64::new(0),
                exhausted: AtomicU64::new(0),
                totals: Mutex::new(StreamStats::default()),
            }),
        })
    }
}

fn oom_clone(e: &BuildError) -> BuildError {
    match e {
        BuildError::OutOfMemory { frames, bytes } => BuildError::OutOfMemory {
            frames: *frames,
            bytes: *bytes,
        },
        _ => unreachable!("only called with OutOfMemory"),
    }
}

impl BufferPool {
    /// A builder with 1024 frames of 8192 bytes.
    pub fn builder() -> PoolBuilder {
        PoolBuilder {
            frames: 1024,
            block_size: DEFAULT_BLOCK_SIZE,
            prefault: false,
        }
    }

    /// A pool of `frames` frames of `block_size` bytes.
    pub fn new(frames: usize, block_size: usize) -> Result<BufferPool, BuildError> {
        Self::builder()
            .frames(frames)
            .block_size(block_size)
            .build()
    }

    /// Number of frames.
    pub fn frames(&self) -> usize {
        self.inner.nframes
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> usize {
        self.inner.block_size
    }

    /// Total frame memory in bytes.
    pub fn capacity_bytes(&self) -> usize {
        self.inner.nframes * self.inner.block_size
    }

    /// The memory every frame lies in: [`capacity_bytes`](Self::capacity_bytes)
    /// bytes at the returned pointer, 4096-aligned, allocated when the pool
    /// is built and freed when its last handle (pool, stream, guard or read)
    /// is gone; it never moves. For engines that register it with the kernel
    /// once (io_uring fixed buffers), so that reads into frames need not map
    /// them every time. Reading or writing through the pointer is up to the
    /// frame protocol: only a [`ReadRequest`](crate::ReadRequest) may write
    /// its own frames ([`ReadRequest::raw_buffers`](crate::ReadRequest::raw_buffers)).
    pub fn memory(&self) -> (*mut u8, usize) {
        (self.inner.memory.as_ptr(), self.capacity_bytes())
    }

    /// Whether `self` and `other` are handles of the same pool.
    pub fn same_pool(&self, other: &BufferPool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether `block` of `file` is in the pool with valid contents.
    pub fn contains(&self, file: FileId, block: BlockNumber) -> bool {
        let inner = &self.inner;
        let Some(table) = lock(&inner.files).get(&file).cloned() else {
            return false;
        };
        match table.peek(block) {
            Some(slot) if slot != EMPTY_SLOT => {
                let (f, g) = table::unpack(slot);
                let st = inner.header(f).load();
                frame::gen(st) == g && frame::status(st) == Status::Valid
            }
            _ => false,
        }
    }

    /// Drops every unpinned frame of `file` from the pool (pinned ones and
    /// ones being read stay). Returns how many were dropped. Use it to
    /// make the next scan of a file cold for the pool.
    pub fn invalidate(&self, file: FileId) -> usize {
        self.inner.invalidate(file)
    }

    /// A snapshot of the pool's counters and frame states. It scans every
    /// frame header: meant for reports, not hot loops.
    pub fn stats(&self) -> PoolStats {
        self.inner.stats()
    }
}

/// The pool's shared state. Hot fields first; see each comment.
pub(crate) struct PoolInner {
    /// Start of frame memory: `nframes * block_size` bytes, `FRAME_ALIGN`ed.
    memory: NonNull<u8>,
    /// The allocation `memory` lies in, and its layout, to free it.
    base: NonNull<u8>,
    layout: Layout,
    pub(crate) block_size: usize,
    /// log2(block_size): frame offset is `f << block_shift`.
    block_shift: u32,
    pub(crate) nframes: usize,
    /// One header per frame (state word + tag).
    headers: Box<[FrameHeader]>,
    /// Block tables by file id, each with its own tag (see `FileTable::tag`);
    /// locked only when a stream is built and for maintenance, never on a
    /// lookup (streams cache their `FileView`). Tables are never removed.
    files: Mutex<HashMap<FileId, Arc<FileTable>>>,
    /// Clock-sweep hand; only the miss path touches it.
    hand: AtomicU64,
    /// Tasks waiting for another stream's read.
    waiters: Waiters,
    /// Reads waiting to hear that no stream wants them (`watchers.rs`).
    pub(crate) watchers: Watchers,
    /// Frames live streams claim for look-ahead (each its pin budget, at most
    /// the pool, while it reads blocks itself; nothing while it only follows
    /// other streams' reads), summed; read when a stream looks ahead, written
    /// when a stream is built or dropped or turns reader or follower.
    pub(crate) reserved: AtomicUsize,
    /// Live streams on this pool.
    pub(crate) streams: AtomicUsize,
    /// `nframes / streams`, kept up to date when streams come and go so the
    /// look-ahead path need not divide.
    share: AtomicUsize,
    /// Frames taken from another block by the clock sweep (miss path only).
    evictions: AtomicU64,
    /// Frames reused from a stream's ring.
    ring_reuses: AtomicU64,
    /// Times the sweep found every frame pinned.
    exhausted: AtomicU64,
    /// Stats of streams that have ended, folded in when each is dropped.
    pub(crate) totals: Mutex<StreamStats>,
}

// SAFETY: `memory` is the only non-auto-Send/Sync field. Access to the bytes
// it points to follows the frame protocol in `frame.rs`: one writer (the IO
// owner) with no readers, or many readers (pinned, VALID) with no writer. The
// pointer itself is never reassigned and is freed only in `Drop`, when no
// `Arc<PoolInner>` (and so no guard or read) remains.
unsafe impl Send for PoolInner {}
// SAFETY: as above; all other fields are `Sync`.
unsafe impl Sync for PoolInner {}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed(self.layout)` and is freed
        // once; no frame can be referenced now that the last Arc is gone.
        unsafe { alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

impl fmt::Debug for PoolInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolInner")
            .field("frames", &self.nframes)
            .finish_non_exhaustive()
    }
}

impl PoolInner {
    #[inline]
    pub(crate) fn header(&self, f: u32) -> &FrameHeader {
        &self.headers[f as usize]
    }

    /// Raw pointer to frame `f`'s bytes. Dereferencing it is governed by the
    /// frame protocol; see callers.
    #[inline]
    pub(crate) fn frame_ptr(&self, f: u32) -> *mut u8 {
        assert!((f as usize) < self.nframes, "frame {f} out of range");
        // SAFETY: `f < nframes`, so the offset stays inside the allocation
        // of `nframes << block_shift` bytes.
        unsafe { self.memory.as_ptr().add((f as usize) << self.block_shift) }
    }

    #[inline]
    pub(crate) fn status(&self, f: u32) -> Status {
        frame::status(self.header(f).load())
    }

    /// Whether any pin is held on frame `f`.
    pub(crate) fn is_pinned(&self, f: u32) -> bool {
        frame::pins(self.header(f).load()) != 0
    }

    /// For a watcher already registered in `watchers`: whether a pin is
    /// still held on one of `frames`. `seen` is the release count when
    /// the pins were last found held: while no stream has released pins
    /// since, they still are, and the frames are not looked at again. Read
    /// after registering (see `watchers.rs`): a release this misses wakes
    /// the watcher.
    pub(crate) fn still_pinned(&self, frames: &[u32], seen: &mut Option<u64>) -> bool {
        let releases = self.watchers.releases();
        if *seen == Some(releases) {
            return true;
        }
        // Frames a read has published since are VALID; a pin on one (the
        // consumer holding its page, or a later block in that frame) only
        // keeps the read going, which is always correct.
        if frames.iter().any(|&f| self.is_pinned(f)) {
            *seen = Some(releases);
            true
        } else {
            false
        }
    }

    #[inline]
    pub(crate) fn unpin(&self, f: u32) {
        self.header(f).unpin();
    }

    /// Classifies a frame the caller has pinned, starting I/O on it if it is
    /// EMPTY.
    #[inline]
    pub(crate) fn classify_pinned(&self, f: u32) -> Lookup {
        let hdr = self.header(f);
        loop {
            match frame::status(hdr.load()) {
                Status::Valid => return Lookup::Hit(f),
                Status::Io => return Lookup::Busy(f),
                Status::Empty => match hdr.try_start_io() {
                    Ok(()) => return Lookup::Read(f),
                    Err(_) => continue,
                },
            }
        }
    }

    /// The view a stream uses to look blocks of `file` up.
    pub(crate) fn file_view(&self, file: FileId) -> FileView {
        let mut files = lock(&self.files);
        // Tables are never removed, so the count so far is a tag no table
        // has had.
        let tag = files.len() as u64;
        let table = Arc::clone(
            files
                .entry(file)
                .or_insert_with(|| Arc::new(FileTable::new(tag))),
        );
        drop(files);
        FileView::new(table)
    }

    /// Looks `block` up, pinning its frame; on a miss takes a frame (from
    /// `ring` first, if given, then by clock sweep), installs it for the
    /// block and returns it as [`Lookup::Read`]. The hit path is one load
    /// of the block's slot and one CAS on the frame.
    #[inline]
    pub(crate) fn lookup(
        &self,
        view: &mut FileView,
        block: BlockNumber,
        ring: Option<&mut Ring>,
    ) -> Result<Lookup, Exhausted> {
        match self.probe(view, block)? {
            Ok(hit) => Ok(hit),
            Err(seen) => self.claim_for(view, block, ring, seen),
        }
    }

    /// [`lookup`](Self::lookup)'s miss: a frame claimed and installed for
    /// `block`. Out of line, so that the hit path inlines into its caller.
    #[inline(never)]
    fn claim_for(
        &self,
        view: &mut FileView,
        block: BlockNumber,
        ring: Option<&mut Ring>,
        seen: u64,
    ) -> Result<Lookup, Exhausted> {
        let victim = self.victim(ring)?;
        self.install(victim, view, block, seen)
    }

    /// The hit path: one load of the block's slot, one CAS on the frame.
    /// `Ok(Err(seen))`: no frame holds the block; `seen` is the slot's
    /// (stale or empty) value, for [`install`](Self::install).
    #[inline]
    fn probe(
        &self,
        view: &mut FileView,
        block: BlockNumber,
    ) -> Result<Result<Lookup, u64>, Exhausted> {
        let file = view.id();
        let seen = view.slot(block).load(Ordering::Acquire);
        match self.pin_slot(seen, file, block) {
            // A frame VALID when pinned stays VALID while the pin is held
            // (frame.rs rule 3: only a claim, which needs no pins, takes a
            // frame out of VALID): no second look at its state.
            SlotPin::Pinned(f, s) if frame::status(s) == Status::Valid => Ok(Ok(Lookup::Hit(f))),
            SlotPin::Pinned(f, _) => Ok(Ok(self.classify_pinned(f))),
            SlotPin::Stale => Ok(Err(seen)),
            SlotPin::Full => Err(Exhausted),
        }
    }

    /// Whether a frame holds `block` of `view`'s file, valid, now. No pin
    /// is taken, so the answer is a hint, true or false a moment later: what
    /// look-ahead under full look-ahead decides its distance by.
    pub(crate) fn resident(&self, view: &mut FileView, block: BlockNumber) -> bool {
        let slot = view.slot(block).load(Ordering::Acquire);
        if slot == EMPTY_SLOT {
            return false;
        }
        let (f, g) = table::unpack(slot);
        let st = self.header(f).load();
        frame::gen(st) == g && frame::status(st) == Status::Valid
    }

    /// [`lookup`](Self::lookup) without the miss path (the tests' probe).
    #[cfg(test)]
    pub(crate) fn lookup_existing(
        &self,
        view: &mut FileView,
        block: BlockNumber,
    ) -> Result<Option<Lookup>, Exhausted> {
        self.probe(view, block).map(Result::ok)
    }

    /// Pins the frame a slot names if it still holds `(file, block)`
    /// (`file`: the file table's tag, see `FileTable::tag`).
    #[inline]
    fn pin_slot(&self, slot: u64, file: u64, block: BlockNumber) -> SlotPin {
        if slot == EMPTY_SLOT {
            return SlotPin::Stale;
        }
        let (f, g) = table::unpack(slot);
        let hdr = self.header(f);
        let pinned = match hdr.pin_if_gen(g) {
            PinIf::Pinned(s) => s,
            PinIf::Stale => return SlotPin::Stale,
            PinIf::Full => return SlotPin::Full,
        };
        // Generations are 32 bits and stale slots are never cleared, so
        // after 2^32 claims of one frame an old slot can match again: the
        // tag decides. It was written before the frame was published and
        // cannot change while we hold a pin (rules 3 and 4); our pin's
        // Acquire CAS made it visible.
        if hdr.file.load(Ordering::Relaxed) != file || hdr.block.load(Ordering::Relaxed) != block {
            hdr.unpin();
            return SlotPin::Stale;
        }
        SlotPin::Pinned(f, pinned)
    }

    /// Installs the claimed `victim` (pins = 1, EMPTY, unpublished) for
    /// `block`, or gives it back if someone installed a frame first.
    /// `stale`: the slot's value as the caller found it, empty or naming a
    /// frame that no longer holds the block (so the first attempt need not
    /// look again).
    fn install(
        &self,
        victim: u32,
        view: &mut FileView,
        block: BlockNumber,
        stale: u64,
    ) -> Result<Lookup, Exhausted> {
        let hdr = self.header(victim);
        let g = frame::gen(hdr.load());
        let file = view.id();
        let slot = view.slot(block);
        let mut cur = stale;
        loop {
            // A slot that changed since it was found stale may name a frame
            // holding the block now: pin that one instead. (A stale slot
            // stays stale: its frame's generation only grows.)
            if cur != stale {
                match self.pin_slot(cur, file, block) {
                    SlotPin::Pinned(f, _) => {
                        self.release_claim(victim);
                        return Ok(self.classify_pinned(f));
                    }
                    SlotPin::Full => {
                        self.release_claim(victim);
                        return Err(Exhausted);
                    }
                    // Empty, or that frame has moved on to another block.
                    SlotPin::Stale => {}
                }
            }
            // Rule 4: tag first, then IO status, then publish. Rule 5: a
            // lookup through a stale slot naming generation `g` may hold a
            // pin on the frame; the step to IO keeps it.
            hdr.file.store(file, Ordering::Relaxed);
            hdr.block.store(block, Ordering::Relaxed);
            if hdr.claimed_to_io().is_err() {
                // Such a lookup matched this very block and started its read
                // into the frame: follow that read, published under the
                // slot's unchanged value (or unpublished, if another frame
                // was installed for the block meanwhile; it still fills).
                let _ = slot.compare_exchange(
                    cur,
                    table::pack(victim, g),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                return Ok(self.classify_pinned(victim));
            }
            match slot.compare_exchange(
                cur,
                table::pack(victim, g),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(Lookup::Read(victim)),
                Err(actual) => {
                    // Never published. Only a lookup through a stale slot
                    // (rule 5) that found this very tag can have seen the IO
                    // status and be waiting for it: end it as a failed read
                    // would, waking any waiter, keeping every pin.
                    self.finish_io(victim, false);
                    cur = actual;
                }
            }
        }
    }

    /// Returns a claimed frame that was never published to the free state.
    fn release_claim(&self, f: u32) {
        let hdr = self.header(f);
        hdr.file.store(NO_FILE, Ordering::Relaxed);
        hdr.release_claim();
    }

    /// Tries to claim frame `f` for another block: succeeds if it is
    /// unpinned, not being read, and (per `max_usage`) not recently used. On
    /// success the frame is pinned once by us, EMPTY, at a new generation,
    /// so every slot naming it goes stale at once (frame.rs rule 3). The
    /// caller counts an eviction when the answer says a valid block went.
    fn try_claim(&self, f: u32, max_usage: u64) -> Claim {
        let hdr = self.header(f);
        let mut s = hdr.load();
        loop {
            if frame::pins(s) != 0 || frame::status(s) == Status::Io {
                return Claim::Busy;
            }
            if frame::usage(s) > max_usage {
                let n = s - frame::USAGE_ONE;
                match hdr
                    .state
                    .compare_exchange_weak(s, n, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Claim::Aged,
                    Err(cur) => {
                        s = cur;
                        continue;
                    }
                }
            }
            let n = frame::claimed(frame::gen(s).wrapping_add(1), Status::Empty);
            match hdr
                .state
                .compare_exchange_weak(s, n, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(cur) => s = cur,
            }
        }
        hdr.file.store(NO_FILE, Ordering::Relaxed);
        Claim::Got {
            evicted: frame::status(s) == Status::Valid,
        }
    }

    /// Finds a frame to reuse: the stream's ring slot first (PostgreSQL's
    /// strategy ring), then the clock sweep. Fails only when a full sweep
    /// finds every frame pinned or being read.
    fn victim(&self, ring: Option<&mut Ring>) -> Result<u32, Exhausted> {
        let Some(ring) = ring else {
            return self.sweep();
        };
        // The current slot's frame; while the ring cannot reuse it (pinned:
        // look-ahead, or the consumer, holds more than the window; or used
        // again by someone else), the first slot past the window, one
        // read's worth wider each time, up to the whole ring.
        while let Some(f) = ring.current() {
            if let Claim::Got { evicted } = self.try_claim(f, 1) {
                // Counted in the ring and added to the pool's counters in
                // batches: two shared read-modify-writes per page were a
                // measurable share of a warm scan's per-page cost.
                if ring.count_reuse(evicted) {
                    self.flush_ring_counts(ring);
                }
                ring.advance();
                return Ok(f);
            }
            if !ring.widen() {
                break;
            }
        }
        let f = self.sweep()?;
        let grow = ring.growth_wanted();
        if grow == 0 {
            ring.add(f);
            return Ok(f);
        }
        // Look-ahead is deeper than the ring: grow it by a block of frames
        // taken from the sweep together, which are adjacent in memory when
        // the sweep finds them free in a row, so the ring keeps handing out
        // runs of adjacent frames (one buffer per read for the engines).
        // The extra frames are released at once; the ring claims them when
        // it reaches them.
        let mut block = Vec::with_capacity(grow);
        block.push(f);
        while block.len() < grow {
            match self.sweep_counted(false) {
                Ok(g) => {
                    self.release_claim(g);
                    block.push(g);
                }
                Err(Exhausted) => break,
            }
        }
        ring.insert_block(&block);
        Ok(f)
    }

    /// The clock sweep: a frame no one holds, claimed (pins = 1, EMPTY, new
    /// generation). Fails only when a full lap finds every frame pinned or
    /// being read.
    fn sweep(&self) -> Result<u32, Exhausted> {
        self.sweep_counted(true)
    }

    /// [`sweep`](Self::sweep), counting a failure in the pool's stats only
    /// if `count` (growing a ring past what is free is not a failure).
    fn sweep_counted(&self, count: bool) -> Result<u32, Exhausted> {
        let n = self.nframes as u64;
        // Each frame may need MAX_USAGE passes to age out; a sweep that sees
        // only pinned frames for a whole lap gives up.
        let mut busy_run = 0u64;
        loop {
            let f = (self.hand.fetch_add(1, Ordering::Relaxed) % n) as u32;
            match self.try_claim(f, 0) {
                Claim::Got { evicted } => {
                    if evicted {
                        self.evictions.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(f);
                }
                Claim::Aged => busy_run = 0,
                Claim::Busy => {
                    busy_run += 1;
                    if busy_run > n {
                        if count {
                            self.exhausted.fetch_add(1, Ordering::Relaxed);
                        }
                        return Err(Exhausted);
                    }
                }
            }
        }
    }

    /// Adds the reuses and evictions `ring` has counted to the pool's
    /// counters (done every [`Ring::FLUSH_EVERY`] reuses and when its stream
    /// ends, so a live stream's last few are not in [`PoolStats`] yet).
    pub(crate) fn flush_ring_counts(&self, ring: &mut Ring) {
        let (reuses, evictions) = ring.take_counts();
        if reuses != 0 {
            self.ring_reuses.fetch_add(reuses, Ordering::Relaxed);
        }
        if evictions != 0 {
            self.evictions.fetch_add(evictions, Ordering::Relaxed);
        }
    }

    /// Publishes the end of a read on frame `f`: VALID if `ok`, else EMPTY
    /// (so no failed read leaves a valid-looking frame), and wakes waiters.
    pub(crate) fn finish_io(&self, f: u32, ok: bool) {
        let hdr = self.header(f);
        let st = if ok { Status::Valid } else { Status::Empty };
        let mut s = hdr.load();
        loop {
            debug_assert_eq!(
                frame::status(s),
                Status::Io,
                "finish_io on a frame not in IO"
            );
            let n = frame::with_status(s, st) & !frame::WAITERS;
            match hdr
                .state
                .compare_exchange_weak(s, n, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(cur) => s = cur,
            }
        }
        if s & frame::WAITERS != 0 {
            self.waiters.wake(f);
        }
    }

    /// Registers `waker` for the end of the read on pinned frame `f`. Returns
    /// false if that read has already ended.
    pub(crate) fn wait_io(&self, f: u32, waker: &Waker) -> bool {
        self.waiters.register(f, self.header(f), waker)
    }

    fn invalidate(&self, file: FileId) -> usize {
        let Some(table) = lock(&self.files).get(&file).cloned() else {
            return 0;
        };
        let mut dropped = 0;
        table.for_each_slot(|_, slot| {
            let cur = slot.load(Ordering::Acquire);
            if cur == EMPTY_SLOT {
                return;
            }
            let (f, g) = table::unpack(cur);
            let hdr = self.header(f);
            let s = hdr.load();
            if frame::gen(s) != g || frame::pins(s) != 0 || frame::status(s) == Status::Io {
                return;
            }
            // A claim (rule 3), then back to free: the tag is cleared while
            // we hold the claim pin, so no one who takes the frame next can
            // have its tag overwritten (rule 4).
            let claimed = frame::claimed(g.wrapping_add(1), Status::Empty);
            if hdr
                .state
                .compare_exchange(s, claimed, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let _ = slot.compare_exchange(cur, EMPTY_SLOT, Ordering::AcqRel, Ordering::Acquire);
                self.release_claim(f);
                dropped += 1;
            }
        });
        dropped
    }

    fn stats(&self) -> PoolStats {
        let mut st = PoolStats {
            frames: self.nframes,
            block_size: self.block_size,
            evictions: self.evictions.load(Ordering::Relaxed),
            ring_reuses: self.ring_reuses.load(Ordering::Relaxed),
            exhausted: self.exhausted.load(Ordering::Relaxed),
            streams: self.streams.load(Ordering::Relaxed),
            ended_streams: lock(&self.totals).clone(),
            ..PoolStats::default()
        };
        for h in self.headers.iter() {
            let s = h.load();
            if frame::pins(s) > 0 {
                st.pinned += 1;
            }
            match frame::status(s) {
                Status::Valid => st.valid += 1,
                Status::Io => st.reading += 1,
                Status::Empty => {}
            }
        }
        st
    }

    /// Registers a stream claiming `demand` frames for look-ahead.
    pub(crate) fn stream_started(&self, demand: usize) {
        self.reserved.fetch_add(demand, Ordering::Relaxed);
        let n = self.streams.fetch_add(1, Ordering::Relaxed) + 1;
        self.share
            .store((self.nframes / n).max(1), Ordering::Relaxed);
    }

    /// Unregisters a stream (see [`stream_started`](Self::stream_started)).
    pub(crate) fn stream_ended(&self, demand: usize) {
        self.reserved.fetch_sub(demand, Ordering::Relaxed);
        let n = self.streams.fetch_sub(1, Ordering::Relaxed) - 1;
        self.share
            .store((self.nframes / n.max(1)).max(1), Ordering::Relaxed);
    }

    /// Changes a live stream's claim from `old` to `new` frames.
    pub(crate) fn change_claim(&self, old: usize, new: usize) {
        if new > old {
            self.reserved.fetch_add(new - old, Ordering::Relaxed);
        } else {
            self.reserved.fetch_sub(old - new, Ordering::Relaxed);
        }
    }

    /// Frames a stream claiming `mine` may pin for look-ahead now: what the
    /// other live streams have not claimed, and never less than a fair share
    /// of the pool, so many streams on a small pool each keep several reads
    /// in flight instead of one hogging it and the rest starving.
    #[inline]
    pub(crate) fn available_for(&self, mine: usize) -> usize {
        let others = self.reserved.load(Ordering::Relaxed).saturating_sub(mine);
        let free = self.nframes.saturating_sub(others);
        free.max(self.share.load(Ordering::Relaxed))
    }
}

enum Claim {
    /// Claimed; `evicted`: it held a valid block.
    Got {
        evicted: bool,
    },
    Aged,
    Busy,
}

/// What [`PoolInner::pin_slot`] did.
enum SlotPin {
    /// Pinned: the frame, and the state word the pin made.
    Pinned(u32, u64),
    Stale,
    Full,
}
