//! Shared by the integration tests: page-cache eviction and the
//! conformance harness over stamped files on disk.

#![allow(dead_code)]

use pagestream::testing::DiskFiles;
use pagestream_threadpool::{OpenOptions, ThreadPoolEngine, ThreadPoolFile};
use std::io;
use std::path::Path;

/// Drops `file`'s pages from the OS page cache, and checks with `mincore`
/// that none is left: `POSIX_FADV_DONTNEED` skips pages it cannot drop at
/// that moment (under writeback, locked), so it is retried a few times.
pub fn evict(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    file.sync_all().expect("fsync");
    for attempt in 0.. {
        // SAFETY: posix_fadvise takes no pointers.
        let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0, "posix_fadvise(DONTNEED)");
        let resident = resident_pages(file);
        if resident == 0 {
            return;
        }
        assert!(
            attempt < 50,
            "{resident} pages still cached after {attempt} evictions"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Pages of `file` in the OS page cache (`mmap` + `mincore`).
pub fn resident_pages(file: &std::fs::File) -> usize {
    use std::os::fd::AsRawFd;
    let len = file.metadata().expect("metadata").len() as usize;
    if len == 0 {
        return 0;
    }
    // SAFETY: a fresh read-only shared mapping of the whole file; checked
    // for MAP_FAILED below and unmapped before returning; nothing reads
    // through it.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(addr, libc::MAP_FAILED, "mmap");
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: `addr` is a live mapping of `len` bytes and `vec` has one byte
    // per 4 KiB page of it, as mincore requires.
    let r = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(addr, len) };
    assert_eq!(r, 0, "mincore");
    vec.iter().filter(|&&b| b & 1 != 0).count()
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
