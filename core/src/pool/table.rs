//! Block tables: `block → (frame, generation)` per file, lock-free to read.
//!
//! Each file the pool has seen has a [`FileTable`]: chunks of
//! [`CHUNK_BLOCKS`] slots, each slot an `AtomicU64` packing the frame number
//! and the generation the frame had when it was installed for that block
//! (see `frame.rs`). A stream keeps a [`FileView`], its own cache of the
//! table's chunks, so a lookup is an index into a local vector, one atomic
//! load of the slot and one CAS to pin the frame — no lock, no hashing, and
//! for a sequential scan the slots it reads are adjacent in memory, which
//! the hardware prefetcher follows. Chunks are created on first use under
//! the table's mutex (once per 4096 blocks per stream) and never freed
//! before the pool.
//!
//! Slots are only ever *installed* by CAS; nobody clears a slot when its
//! frame is evicted. A stale slot simply stops matching its frame's
//! generation and reads as empty.

use crate::sync::{lock, Arc, AtomicU64, Mutex, Ordering};
use crate::BlockNumber;

/// Blocks per chunk (32 KiB of slots; 32 MiB of data at 8 KiB blocks).
pub(crate) const CHUNK_BLOCKS: usize = 4096;
const CHUNK_SHIFT: u32 = CHUNK_BLOCKS.trailing_zeros();

/// A slot holding no frame.
pub(crate) const EMPTY_SLOT: u64 = u64::MAX;

#[inline]
pub(crate) fn pack(frame: u32, gen: u32) -> u64 {
    (u64::from(gen) << 32) | u64::from(frame)
}

#[inline]
pub(crate) fn unpack(slot: u64) -> (u32, u32) {
    (slot as u32, (slot >> 32) as u32)
}

#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) slots: Box<[AtomicU64]>,
}

impl Chunk {
    fn new() -> Self {
        Chunk {
            slots: (0..CHUNK_BLOCKS)
                .map(|_| AtomicU64::new(EMPTY_SLOT))
                .collect(),
        }
    }
}

/// The block table of one file.
#[derive(Debug)]
pub(crate) struct FileTable {
    pub(crate) id: u64,
    chunks: Mutex<Vec<Option<Arc<Chunk>>>>,
}

impl FileTable {
    pub(crate) fn new(id: u64) -> Self {
        FileTable {
            id,
            chunks: Mutex::new(Vec::new()),
        }
    }

    /// The chunk holding `block`'s slot, created if `create`.
    fn chunk(&self, ci: usize, create: bool) -> Option<Arc<Chunk>> {
        let mut chunks = lock(&self.chunks);
        if ci >= chunks.len() {
            if !create {
                return None;
            }
            chunks.resize(ci + 1, None);
        }
        if chunks[ci].is_none() && create {
            chunks[ci] = Some(Arc::new(Chunk::new()));
        }
        chunks[ci].clone()
    }

    /// Every installed slot value, for maintenance (invalidate, reports).
    pub(crate) fn for_each_slot(&self, mut f: impl FnMut(BlockNumber, &AtomicU64)) {
        let chunks = lock(&self.chunks).clone();
        for (ci, c) in chunks.iter().enumerate() {
            if let Some(c) = c {
                for (i, s) in c.slots.iter().enumerate() {
                    f(((ci as u64) << CHUNK_SHIFT) + i as u64, s);
                }
            }
        }
    }

    /// The slot for `block` if its chunk exists.
    pub(crate) fn peek(&self, block: BlockNumber) -> Option<u64> {
        let c = self.chunk((block >> CHUNK_SHIFT) as usize, false)?;
        Some(c.slots[(block as usize) & (CHUNK_BLOCKS - 1)].load(Ordering::Acquire))
    }
}

/// One stream's cached view of a file's table.
#[derive(Debug)]
pub(crate) struct FileView {
    pub(crate) table: Arc<FileTable>,
    chunks: Vec<Option<Arc<Chunk>>>,
}

impl FileView {
    pub(crate) fn new(table: Arc<FileTable>) -> Self {
        FileView {
            table,
            chunks: Vec::new(),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.table.id
    }

    /// The slot of `block`, creating its chunk if needed.
    #[inline]
    pub(crate) fn slot(&mut self, block: BlockNumber) -> &AtomicU64 {
        let ci = (block >> CHUNK_SHIFT) as usize;
        if ci >= self.chunks.len() || self.chunks[ci].is_none() {
            self.fill(ci);
        }
        match &self.chunks[ci] {
            Some(c) => &c.slots[(block as usize) & (CHUNK_BLOCKS - 1)],
            None => unreachable!("fill created the chunk"),
        }
    }

    #[cold]
    fn fill(&mut self, ci: usize) {
        if ci >= self.chunks.len() {
            self.chunks.resize(ci + 1, None);
        }
        self.chunks[ci] = self.table.chunk(ci, true);
    }
}
