//! Shared by the integration tests: stamped files on disk, the conformance
//! harness, and the io_uring availability check.

#![allow(dead_code)]

use pagestream::testing::conformance::Harness;
use pagestream::testing::StampedFile;
use pagestream_tokio_uring::{TokioUringEngine, TokioUringFile};
use std::sync::Mutex;

/// A stamped file, opened buffered or O_DIRECT, already unlinked.
pub fn stamped(nblocks: u64, block_size: usize, direct: bool) -> (TokioUringFile, u64) {
    let stamped = StampedFile::new(
        if direct { "direct" } else { "buffered" },
        nblocks,
        block_size,
    );
    let file = if direct {
        TokioUringFile::open_direct(stamped.path(), block_size)
    } else {
        TokioUringFile::open(stamped.path())
    }
    .expect("open stamped file");
    let seed = stamped.seed();
    stamped.remove();
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
