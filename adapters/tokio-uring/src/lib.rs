//! # pagestream-tokio-uring
//!
//! A [`pagestream`] engine on [tokio-uring]: every read is one io_uring
//! operation that the kernel performs straight into the pool's frames, with
//! no copy and no I/O thread.
//!
//! - [`TokioUringEngine`]: the engine. [`IoEngine::start_read`] spawns a
//!   task on the current tokio-uring runtime that submits the read (`READ`
//!   into adjacent frames, `READV` with a buffer per frame otherwise),
//!   completes the request when the CQE arrives and re-submits any short
//!   read's remainder. Reads thus complete on their own (an abandoned stream
//!   never holds up another waiting for the same block); a cancelled read's
//!   frames go back to empty only once the kernel is done with them; and the
//!   pool's memory is never freed under a read. The comments at the top of
//!   `src/engine.rs` and `src/buf.rs` explain how (DESIGN §3).
//! - [`TokioUringFile`]: an open file, buffered or `O_DIRECT`
//!   ([`TokioUringFile::open_direct`] checks the block size against the
//!   file system's alignment and fails with `InvalidInput` naming both).
//!
//! Streams must be polled inside a tokio-uring runtime
//! (`tokio_uring::start`, or [`try_start`], which returns an error instead of
//! panicking where io_uring is unavailable): each read goes to the ring of
//! the thread that starts it and is completed by a task of that thread's
//! runtime. The engine and file handles hold no runtime state and are
//! `Send + Sync + Clone` (so one open file and one pool can serve a runtime
//! per thread); a stream is `Send` too, but a stream moved to another
//! thread must be polled inside that thread's tokio-uring runtime. The
//! engine gives no read-ahead advice: reads are asynchronous, and the
//! planner keeps enough of them in flight. It does not tell the planner
//! which reads the page cache served (io_uring does not say), so warm
//! buffered scans keep their look-ahead distance.
//!
//! ```no_run
//! use futures::StreamExt;
//! use pagestream::{source, BufferPool, ReadStream};
//! use pagestream_tokio_uring::{try_start, TokioUringEngine, TokioUringFile};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = TokioUringEngine::new()?; // fails clearly without io_uring
//! let file = TokioUringFile::open_direct("table.dat", 8192)?;
//! let pool = BufferPool::new(1024, 8192)?;
//! try_start(async {
//!     let mut pages = ReadStream::builder(&pool, engine, file)
//!         .build(source::forward(0..1000))?;
//!     while let Some(page) = pages.next().await {
//!         let _page = page?;
//!     }
//!     Ok::<_, std::io::Error>(())
//! })??;
//! # Ok(())
//! # }
//! ```
//!
//! [tokio-uring]: https://docs.rs/tokio-uring/0.5

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![warn(clippy::clone_on_ref_ptr)]
#![deny(unused_must_use, rustdoc::broken_intra_doc_links)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod buf;
mod engine;
mod file;
mod sys;

pub use engine::{EngineStats, TokioUringEngine};
pub use file::TokioUringFile;

use std::future::Future;
use std::io;

#[cfg(doc)]
use pagestream::IoEngine;

/// Checks that io_uring can be used by this process by setting up (and
/// tearing down) a two-entry ring.
///
/// Fails with an error naming the likely cause — `sysctl
/// kernel.io_uring_disabled`, a seccomp filter (containers), an old kernel —
/// and the underlying OS error, instead of panicking later.
pub fn probe() -> io::Result<()> {
    match io_uring::IoUring::new(2) {
        Ok(ring) => {
            drop(ring);
            Ok(())
        }
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "io_uring is unavailable: io_uring_setup failed: {e} (disabled by sysctl \
                 kernel.io_uring_disabled, blocked by a seccomp filter, or a kernel without \
                 io_uring); use pagestream-threadpool instead"
            ),
        )),
    }
}

/// Like `tokio_uring::start`, but returns an error instead of panicking
/// when the runtime (its ring) cannot be created.
pub fn try_start<F: Future>(future: F) -> io::Result<F::Output> {
    probe()?;
    let rt = tokio_uring::Runtime::new(&tokio_uring::builder())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot start tokio-uring: {e}")))?;
    Ok(rt.block_on(future))
}
