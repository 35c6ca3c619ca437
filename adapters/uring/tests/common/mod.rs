//! Shared by the integration tests: stamped files on disk, the conformance
//! harness, and the io_uring availability check.

#![allow(dead_code)]

use pagestream::testing::{require_named, DiskFiles, StampedFile};
use pagestream_uring::{UringBuilder, UringEngine, UringFile, UringRuntime};
use std::io;
use std::path::Path;

/// Opens `path` buffered, or O_DIRECT for `block_size` reads.
pub fn open(path: &Path, block_size: usize, direct: bool) -> io::Result<UringFile> {
    if direct {
        UringFile::open_direct(path, block_size)
    } else {
        UringFile::open(path)
    }
}

/// A stamped file, opened buffered or O_DIRECT, already unlinked.
pub fn stamped(nblocks: u64, block_size: usize, direct: bool) -> (UringFile, u64) {
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

/// A runtime built by `b`, or `None` when io_uring (or what `b` asks of it)
/// is unavailable here: the test is then skipped, or fails under `CI=true`
/// (see [`require_named`]).
pub fn runtime_or_skip_with(test: &str, b: UringBuilder) -> Option<UringRuntime> {
    require_named(test, "io_uring", b.build())
}

/// A default runtime, or `None` (see [`runtime_or_skip_with`]).
pub fn runtime_or_skip(test: &str) -> Option<UringRuntime> {
    runtime_or_skip_with(test, UringRuntime::builder())
}

/// The conformance harness over real files, buffered or O_DIRECT.
pub fn real_files(
    engine: UringEngine,
    direct: bool,
    name: &str,
) -> DiskFiles<UringEngine, impl Fn(&Path, usize) -> io::Result<UringFile>> {
    // Reads complete in the runtime, after the poll that started them.
    DiskFiles::new(engine, name, move |path: &Path, block_size| {
        open(path, block_size, direct)
    })
    .reads_stay_pending(true)
}
