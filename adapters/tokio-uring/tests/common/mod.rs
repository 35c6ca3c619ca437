//! Shared by the integration tests: stamped files on disk, the conformance
//! harness, and the io_uring availability check.

#![allow(dead_code)]

use pagestream::testing::{require_named, DiskFiles, StampedFile};
use pagestream_tokio_uring::{TokioUringEngine, TokioUringFile};
use std::io;
use std::path::Path;

/// Opens `path` buffered, or O_DIRECT for `block_size` reads.
fn open(path: &Path, block_size: usize, direct: bool) -> io::Result<TokioUringFile> {
    if direct {
        TokioUringFile::open_direct(path, block_size)
    } else {
        TokioUringFile::open(path)
    }
}

/// A stamped file, opened buffered or O_DIRECT, already unlinked.
pub fn stamped(nblocks: u64, block_size: usize, direct: bool) -> (TokioUringFile, u64) {
    let stamped = StampedFile::new(
        if direct { "direct" } else { "buffered" },
        nblocks,
        block_size,
    );
    let file = open(stamped.path(), block_size, direct).expect("open stamped file");
    let seed = stamped.seed();
    stamped.remove();
    (file, seed)
}

/// The engine, or `None` when io_uring is unavailable here: the test is
/// then skipped, or fails under `CI=true` (see [`require_named`]).
pub fn engine_or_skip(test: &str) -> Option<TokioUringEngine> {
    require_named(test, "io_uring", TokioUringEngine::new())
}

/// The conformance harness over real files, buffered or O_DIRECT.
pub fn real_files(
    engine: TokioUringEngine,
    direct: bool,
    name: &str,
) -> DiskFiles<TokioUringEngine, impl Fn(&Path, usize) -> io::Result<TokioUringFile>> {
    // Reads complete in the runtime, after the poll that started them.
    DiskFiles::new(engine, name, move |path: &Path, block_size| {
        open(path, block_size, direct)
    })
    .reads_stay_pending(true)
}
