//! Shared by the integration tests: stamped files on disk, the conformance
//! harness, and the io_uring availability check; [`on_tokio`] for the
//! tests of `UringTokioEngine`.

#![allow(dead_code)]

#[cfg(feature = "tokio")]
pub mod on_tokio;

use pagestream::testing::{require_named, DiskFiles, StampedFile};
use pagestream::{source, BufferPool, IoEngine, ReadStream};
use pagestream_uring::{UringBuilder, UringEngine, UringFile, UringRuntime};
use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::pin::Pin;
use std::task::Poll;

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
    // O_DIRECT reads complete in the runtime, after the poll that started
    // them; a buffered read the page cache holds completes in `start_read`
    // (the inline `RWF_NOWAIT` attempt; a caller that turns it off says so
    // with `reads_stay_pending(true)`).
    DiskFiles::new(engine, name, move |path: &Path, block_size| {
        open(path, block_size, direct)
    })
    .reads_stay_pending(direct)
}

/// Polls `fut` exactly once.
pub async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx))).await
}

/// Drops the first `len` bytes of `path` from the page cache, so buffered
/// reads of them wait for the device.
pub fn evict(path: &Path, len: u64) {
    let f = std::fs::File::open(path).expect("open for fadvise");
    pagestream::os::fadvise(f.as_raw_fd(), 0, len, libc::POSIX_FADV_DONTNEED)
        .expect("posix_fadvise(DONTNEED)");
}

/// A stream whose first poll starts one read, of blocks `first..first + n`
/// of `file`, and nothing else: `max_ios` 0 gives a stream a budget of one
/// read, so streams like it for consecutive ranges together claim as many
/// frames as they read.
pub fn one_read_stream<E: IoEngine<File = UringFile>>(
    pool: &BufferPool,
    engine: E,
    file: &UringFile,
    first: u64,
    n: usize,
) -> ReadStream<E, source::Forward> {
    ReadStream::builder(pool, engine, file.clone())
        .max_ios(0)
        .io_combine_limit(n)
        .full(true)
        .build(source::forward(first..first + n as u64))
        .expect("build")
}

/// No frame of `pool` is pinned or being read.
pub fn assert_idle(pool: &BufferPool, what: &str) {
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "{what}: {ps}");
}
