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
use std::collections::HashMap;

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

/// [`CHUNK_BLOCKS`] slots. A fixed-length array, so indexing by a masked
/// block number needs no bounds check; boxed, as it is built on the heap (32
/// KiB, more under loom, is too much for a model thread's stack).
#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) slots: Box<[AtomicU64; CHUNK_BLOCKS]>,
}

impl Chunk {
    fn new() -> Arc<Self> {
        let slots: Box<[AtomicU64]> = (0..CHUNK_BLOCKS)
            .map(|_| AtomicU64::new(EMPTY_SLOT))
            .collect();
        match slots.try_into() {
            Ok(slots) => Arc::new(Chunk { slots }),
            Err(_) => unreachable!("the iterator yields CHUNK_BLOCKS slots"),
        }
    }
}

/// Chunks a view indexes densely (a vector); chunks past this — blocks past
/// 2^28, 2 TiB of 8 KiB blocks, which sparse files can have — go in a map,
/// so a huge block number never allocates a huge vector.
const DENSE_CHUNKS: usize = 1 << 16;

/// The block table of one file.
#[derive(Debug)]
pub(crate) struct FileTable {
    /// The pool-local number of this table (the order it was created in):
    /// what frames holding the file's blocks carry as their file tag. The
    /// pool maps each [`FileId`](crate::FileId) to its own table, and
    /// tables live as long as the pool, so no two files share a tag.
    pub(crate) tag: u64,
    chunks: Mutex<HashMap<usize, Arc<Chunk>>>,
}

impl FileTable {
    pub(crate) fn new(tag: u64) -> Self {
        FileTable {
            tag,
            chunks: Mutex::new(HashMap::new()),
        }
    }

    /// Chunk `ci`, created if `create`.
    fn chunk(&self, ci: usize, create: bool) -> Option<Arc<Chunk>> {
        let mut chunks = lock(&self.chunks);
        if create {
            Some(Arc::clone(chunks.entry(ci).or_insert_with(Chunk::new)))
        } else {
            chunks.get(&ci).cloned()
        }
    }

    /// Every slot of every chunk, for maintenance (invalidate, reports).
    pub(crate) fn for_each_slot(&self, mut f: impl FnMut(BlockNumber, &AtomicU64)) {
        let chunks: Vec<(usize, Arc<Chunk>)> = lock(&self.chunks)
            .iter()
            .map(|(&ci, c)| (ci, Arc::clone(c)))
            .collect();
        for (ci, c) in chunks {
            for (i, s) in c.slots.iter().enumerate() {
                f(((ci as u64) << CHUNK_SHIFT) + i as u64, s);
            }
        }
    }

    /// The slot for `block` if its chunk exists.
    pub(crate) fn peek(&self, block: BlockNumber) -> Option<u64> {
        let c = self.chunk(chunk_index(block), false)?;
        Some(c.slots[(block as usize) & (CHUNK_BLOCKS - 1)].load(Ordering::Acquire))
    }
}

#[inline]
fn chunk_index(block: BlockNumber) -> usize {
    usize::try_from(block >> CHUNK_SHIFT).unwrap_or(usize::MAX)
}

/// One stream's cached view of a file's table.
#[derive(Debug)]
pub(crate) struct FileView {
    pub(crate) table: Arc<FileTable>,
    /// Chunks below [`DENSE_CHUNKS`], by index.
    dense: Vec<Option<Arc<Chunk>>>,
    /// Chunks at or past it.
    sparse: HashMap<usize, Arc<Chunk>>,
}

impl FileView {
    pub(crate) fn new(table: Arc<FileTable>) -> Self {
        FileView {
            table,
            dense: Vec::new(),
            sparse: HashMap::new(),
        }
    }

    /// The file's tag in frame headers (see [`FileTable::tag`]): what the
    /// pool compares a frame's `file` with.
    pub(crate) fn id(&self) -> u64 {
        self.table.tag
    }

    /// The slot of `block`, creating its chunk if needed. Small enough to
    /// inline: the rare cases (a chunk this view has not cached, a block
    /// past the dense range) are out of line.
    #[inline]
    pub(crate) fn slot(&mut self, block: BlockNumber) -> &AtomicU64 {
        let ci = chunk_index(block);
        let i = (block as usize) & (CHUNK_BLOCKS - 1);
        if ci >= DENSE_CHUNKS {
            return self.sparse_slot(ci, i);
        }
        if !matches!(self.dense.get(ci), Some(Some(_))) {
            self.fill(ci);
        }
        match &self.dense[ci] {
            Some(c) => &c.slots[i],
            None => unreachable!("fill created the chunk"),
        }
    }

    #[cold]
    #[inline(never)]
    fn sparse_slot(&mut self, ci: usize, i: usize) -> &AtomicU64 {
        let table = &self.table;
        let c = self
            .sparse
            .entry(ci)
            .or_insert_with(|| table.chunk(ci, true).expect("created"));
        &c.slots[i]
    }

    #[cold]
    #[inline(never)]
    fn fill(&mut self, ci: usize) {
        if ci >= self.dense.len() {
            self.dense.resize(ci + 1, None);
        }
        self.dense[ci] = self.table.chunk(ci, true);
    }
}
