//! Shared by the integration tests: stamped files on disk.

#![allow(dead_code)]

use pagestream::testing::conformance::Harness;
use pagestream::testing::stamp;
use pagestream_threadpool::{OpenOptions, ThreadPoolEngine, ThreadPoolFile};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh path in the temp dir, unique to this process and call.
pub fn temp_path(tag: &str) -> PathBuf {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "pagestream-tp-{}-{tag}-{n}.dat",
        std::process::id()
    ))
}

/// Writes `nblocks` stamped blocks of `block_size` to `path` and fsyncs.
pub fn write_stamped(path: &PathBuf, seed: u64, nblocks: u64, block_size: usize) {
    let mut f = std::fs::File::create(path).expect("create temp file");
    let mut buf = vec![0u8; block_size * 64];
    let mut b = 0;
    while b < nblocks {
        let n = (nblocks - b).min(64) as usize;
        for i in 0..n {
            stamp::fill(
                seed,
                b + i as u64,
                &mut buf[i * block_size..(i + 1) * block_size],
            );
        }
        f.write_all(&buf[..n * block_size]).expect("write");
        b += n as u64;
    }
    f.sync_all().expect("fsync");
}

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
        let path = temp_path(self.name);
        let seed = 0x5EED_0000
            ^ SEQ.fetch_add(1, Ordering::Relaxed)
            ^ (u64::from(std::process::id()) << 32);
        write_stamped(&path, seed, nblocks, block_size);
        let opts = if self.direct {
            OpenOptions::new().direct(true).block_size(block_size)
        } else {
            OpenOptions::new()
        };
        let file = ThreadPoolFile::open_with(&path, opts).expect("open stamped file");
        std::fs::remove_file(&path).expect("unlink temp file");
        self.keep.lock().unwrap().push(file.clone());
        (file, seed)
    }

    fn name(&self) -> String {
        self.name.into()
    }
}
