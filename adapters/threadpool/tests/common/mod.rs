//! Shared by the integration tests: page-cache eviction and the
//! conformance harness over stamped files on disk.

#![allow(dead_code)]

use pagestream::testing::conformance::Harness;
use pagestream::testing::StampedFile;
use pagestream_threadpool::{OpenOptions, ThreadPoolEngine, ThreadPoolFile};
use std::sync::Mutex;

/// Drops `path`'s pages from the OS page cache.
pub fn evict(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    file.sync_all().expect("fsync");
    // SAFETY: posix_fadvise takes no pointers.
    let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise(DONTNEED)");
}

/// The conformance harness over real files, buffered or O_DIRECT.
pub struct RealFiles {
    pub engine: ThreadPoolEngine,
    pub direct: bool,
    pub name: &'static str,
    /// Files stay open (their inodes allocated) as long as the harness
    /// lives, so no later file can reuse an inode number, and with it a
    /// `FileId` whose stale pages a pool still holds.
    keep: Mutex<Vec<ThreadPoolFile>>,
}

impl RealFiles {
    pub fn new(engine: ThreadPoolEngine, direct: bool, name: &'static str) -> Self {
        RealFiles {
            engine,
            direct,
            name,
            keep: Mutex::new(Vec::new()),
        }
    }
}

impl Harness for RealFiles {
    type Engine = ThreadPoolEngine;

    fn engine(&self) -> ThreadPoolEngine {
        self.engine.clone()
    }

    fn stamped_file(&self, nblocks: u64, block_size: usize) -> (ThreadPoolFile, u64) {
        let stamped = StampedFile::new(self.name, nblocks, block_size);
        let opts = if self.direct {
            OpenOptions::new().direct(true).block_size(block_size)
        } else {
            OpenOptions::new()
        };
        let file = ThreadPoolFile::open_with(stamped.path(), opts).expect("open stamped file");
        let seed = stamped.seed();
        stamped.remove();
        self.keep.lock().unwrap().push(file.clone());
        (file, seed)
    }

    fn name(&self) -> String {
        self.name.into()
    }
}
