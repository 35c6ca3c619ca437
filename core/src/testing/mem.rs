//! The in-memory reference engine.

use super::stamp;
use crate::engine::{EngineFile, FileId, IoEngine, ReadRequest};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// An engine over in-memory files. Reads copy from the file's bytes and
/// complete inline, before `start_read` returns; it follows the engine
/// contract exactly (short reads only at end of file) and is the reference
/// the other engines are checked against.
#[derive(Debug, Clone, Default)]
pub struct MemEngine {
    counters: Arc<MemCounters>,
}

#[derive(Debug, Default)]
struct MemCounters {
    reads: AtomicU64,
    bytes: AtomicU64,
}

/// A file of [`MemEngine`]: shared immutable bytes.
#[derive(Debug, Clone)]
pub struct MemFile {
    id: FileId,
    data: Arc<Vec<u8>>,
    readahead: bool,
    seed: u64,
}

impl MemFile {
    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The stamp seed the file was created with (0 for plain files).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The same file, claiming (or not) that the kernel reads ahead for it.
    pub fn with_kernel_readahead(mut self, on: bool) -> Self {
        self.readahead = on;
        self
    }
}

impl EngineFile for MemFile {
    fn id(&self) -> FileId {
        self.id
    }
    fn byte_len(&self) -> io::Result<u64> {
        Ok(self.data.len() as u64)
    }
    fn kernel_readahead(&self) -> bool {
        self.readahead
    }
}

impl MemEngine {
    /// A new engine.
    pub fn new() -> Self {
        Self::default()
    }

    /// A file holding `bytes`.
    pub fn create(&self, bytes: Vec<u8>) -> MemFile {
        MemFile {
            id: FileId::anonymous(),
            data: Arc::new(bytes),
            readahead: false,
            seed: 0,
        }
    }

    /// A file of `nblocks` stamped blocks (see [`stamp`]); its seed is its
    /// id, so two files never share contents.
    pub fn create_stamped(&self, nblocks: u64, block_size: usize) -> MemFile {
        let id = FileId::anonymous();
        let seed = id.anonymous_serial().expect("an anonymous id");
        let mut data = vec![0u8; nblocks as usize * block_size];
        for (b, page) in data.chunks_mut(block_size).enumerate() {
            stamp::fill(seed, b as u64, page);
        }
        MemFile {
            id,
            data: Arc::new(data),
            readahead: false,
            seed,
        }
    }

    /// A file of `nblocks` stamped blocks and a partial one of `tail`
    /// bytes (the start of block `nblocks`'s stamp), seeded like
    /// [`create_stamped`](Self::create_stamped).
    pub fn create_stamped_with_tail(
        &self,
        nblocks: u64,
        block_size: usize,
        tail: usize,
    ) -> MemFile {
        let mut f = self.create_stamped(nblocks + 1, block_size);
        let mut data = Arc::try_unwrap(f.data).expect("a fresh file");
        data.truncate(nblocks as usize * block_size + tail);
        f.data = Arc::new(data);
        f
    }

    /// Reads issued so far (remainders count again).
    pub fn reads(&self) -> u64 {
        self.counters.reads.load(Ordering::Relaxed)
    }

    /// Bytes copied so far.
    pub fn bytes_read(&self) -> u64 {
        self.counters.bytes.load(Ordering::Relaxed)
    }
}

impl IoEngine for MemEngine {
    type File = MemFile;

    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        let mut req = req;
        loop {
            self.counters.reads.fetch_add(1, Ordering::Relaxed);
            let off = req.offset().min(file.data.len() as u64) as usize;
            let end = off.saturating_add(req.len_bytes()).min(file.data.len());
            let n = req.copy_from(&file.data[off..end]);
            self.counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
            match req.complete(Ok(n)) {
                Some(rest) => req = rest,
                None => return,
            }
        }
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}
