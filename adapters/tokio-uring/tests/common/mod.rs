//! Shared by the integration tests: stamped files on disk, the conformance
//! harness, and the io_uring availability check.

#![allow(dead_code)]

use pagestream::testing::conformance::Harness;
use pagestream::testing::stamp;
use pagestream_tokio_uring::{TokioUringEngine, TokioUringFile};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A fresh path in the temp dir, unique to this process and call.
pub fn temp_path(tag: &str) -> PathBuf {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "pagestream-uring-{}-{tag}-{n}.dat",
        std::process::id()
    ))
}

/// A seed no other file of this process uses.
pub fn fresh_seed() -> u64 {
    0x0071_0000_0000 ^ SEQ.fetch_add(1, Ordering::Relaxed) ^ (u64::from(std::process::id()) << 40)
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

/// A stamped file, opened buffered or O_DIRECT, already unlinked.
pub fn stamped(nblocks: u64, block_size: usize, direct: bool) -> (TokioUringFile, u64) {
    let path = temp_path(if direct { "direct" } else { "buffered" });
    let seed = fresh_seed();
    write_stamped(&path, seed, nblocks, block_size);
    let file = if direct {
        TokioUringFile::open_direct(&path, block_size)
    } else {
        TokioUringFile::open(&path)
    }
    .expect("open stamped file");
    std::fs::remove_file(&path).expect("unlink temp file");
    (file, seed)
}

/// The engine, or `None` after explaining loudly why the test is skipped.
pub fn engine_or_skip(test: &str) -> Option<TokioUringEngine> {
    match TokioUringEngine::new() {
        Ok(e) => Some(e),
        Err(e) => {
            eprintln!();
            eprintln!("!!!!!!!! SKIPPED {test}: io_uring is not usable here !!!!!!!!");
            eprintln!("!!!!!!!! {e}");
            eprintln!();
            None
        }
    }
}

/// The conformance harness over real files, buffered or O_DIRECT.
pub struct RealFiles {
    pub engine: TokioUringEngine,
    pub direct: bool,
    pub name: &'static str,
    /// Files stay open (their inodes allocated) as long as the harness
    /// lives, so no later file reuses an inode number, and with it a
    /// `FileId` whose stale pages a pool may still hold.
    keep: Mutex<Vec<TokioUringFile>>,
}

impl RealFiles {
    pub fn new(engine: TokioUringEngine, direct: bool, name: &'static str) -> Self {
        RealFiles {
            engine,
            direct,
            name,
            keep: Mutex::new(Vec::new()),
        }
    }
}

impl Harness for RealFiles {
    type Engine = TokioUringEngine;

    fn engine(&self) -> TokioUringEngine {
        self.engine.clone()
    }

    fn stamped_file(&self, nblocks: u64, block_size: usize) -> (TokioUringFile, u64) {
        let (file, seed) = stamped(nblocks, block_size, self.direct);
        self.keep.lock().unwrap().push(file.clone());
        (file, seed)
    }

    fn name(&self) -> String {
        self.name.into()
    }
}
