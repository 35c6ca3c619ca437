//! Shared by the integration tests: page-cache eviction and the
//! conformance harness over stamped files on disk.

#![allow(dead_code)]

use pagestream::testing::DiskFiles;
use pagestream_threadpool::{OpenOptions, ThreadPoolEngine, ThreadPoolFile};
use std::io;
use std::path::Path;

/// Drops `path`'s pages from the OS page cache.
pub fn evict(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    file.sync_all().expect("fsync");
    // SAFETY: posix_fadvise takes no pointers.
    let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise(DONTNEED)");
}

/// The conformance harness over real files, buffered or O_DIRECT.
pub fn real_files(
    engine: ThreadPoolEngine,
    direct: bool,
    name: &str,
) -> DiskFiles<ThreadPoolEngine, impl Fn(&Path, usize) -> io::Result<ThreadPoolFile>> {
    DiskFiles::new(engine, name, move |path: &Path, block_size| {
        let opts = if direct {
            OpenOptions::new().direct(true).block_size(block_size)
        } else {
            OpenOptions::new()
        };
        ThreadPoolFile::open_with(path, opts)
    })
}
