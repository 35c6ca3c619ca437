//! # pagestream-tokio-uring
//!
//! A [`pagestream`] engine on [tokio-uring]: every read is one io_uring
//! operation that the kernel performs straight into the pool's frames, with
//! no copy and no I/O thread.
//!
//! - [`TokioUringEngine`]: the engine. [`IoEngine::start_read`] pushes the
//!   read to the current tokio-uring ring (`READ` into adjacent frames,
//!   `READV` with a buffer per frame otherwise) and spawns a task that
//!   completes the request when the CQE arrives and re-submits any short
//!   read's remainder. Reads thus complete on their own (an abandoned stream
//!   never holds up another waiting for the same block); a cancelled read's
//!   frames go back to empty only once the kernel is done with them; and the
//!   pool's memory is never freed under a read (pagestream's engine
//!   contract: [`pagestream::design`] §5).
//! - [`TokioUringFile`]: an open file, buffered or `O_DIRECT`
//!   ([`TokioUringFile::open_direct`] checks the block size against the
//!   file system's alignment and fails with `InvalidInput` naming both).
//!
//! Streams must be polled inside a tokio-uring runtime
//! ([`try_start`], which returns an error instead of panicking where
//! io_uring is unavailable and uses [`runtime_builder`]'s small submission
//! queue, so reads reach the device without waiting for the thread to park;
//! or `tokio_uring::start` run inside [`release_orphans_after`], without
//! which the reads in flight when the runtime ends are never released): each
//! read goes to the ring of
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

pub use engine::{EngineStats, TokioUringEngine};

/// An open file, buffered or `O_DIRECT`: pagestream-uring's [`UringFile`](pagestream_uring::UringFile),
/// shared by both io_uring engines.
pub use pagestream_uring::UringFile as TokioUringFile;

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
    pagestream_uring::probe()
}

/// Submission-queue entries of the ring [`runtime_builder`] asks for.
///
/// tokio-uring hands its queued SQEs to the kernel when its thread parks, or
/// when a push finds the submission queue full. With its default of 256
/// entries, every read a stream starts in one wake-up goes to the kernel in
/// one `io_uring_enter`, after all of them have been queued, and on a device
/// that completes a batch together the scan runs in lock-step: `max_ios`
/// reads out, all back, the device idle while the stream turns them round.
/// A queue of 4 sends the first reads of a wake-up to the device while the
/// stream is still starting the rest, without a system call per read; of
/// 1 to 256 entries it read fastest (the measurements are in the
/// repository's `docs/engines.md`).
pub const SUBMISSION_QUEUE_ENTRIES: u32 = 4;

/// Completion-queue entries of the ring [`runtime_builder`] asks for:
/// enough for the reads of many streams in flight at once without the
/// kernel's overflow list (tokio-uring's default is twice the submission
/// queue, which at [`SUBMISSION_QUEUE_ENTRIES`] would overflow at depth 9).
pub const COMPLETION_QUEUE_ENTRIES: u32 = 4096;

/// The tokio-uring runtime settings pagestream reads best with: a small
/// submission queue ([`SUBMISSION_QUEUE_ENTRIES`]), so reads reach the
/// device while later ones are still being started, and a large completion
/// queue ([`COMPLETION_QUEUE_ENTRIES`]). [`try_start`] uses it; programs
/// that start tokio-uring themselves can too.
///
/// Ring flags not used: `IORING_SETUP_COOP_TASKRUN` reads no faster,
/// `IORING_SETUP_SQPOLL` costs a kernel thread and CPU per page, and
/// `IORING_SETUP_DEFER_TASKRUN` stalls, since tokio-uring waits for
/// completions in `epoll` and deferred task work runs only inside
/// `io_uring_enter` (`docs/engines.md`).
///
/// ```no_run
/// let out = pagestream_tokio_uring::runtime_builder().start(async { 42 });
/// assert_eq!(out, 42);
/// ```
pub fn runtime_builder() -> tokio_uring::Builder {
    let mut b = tokio_uring::builder();
    b.entries(SUBMISSION_QUEUE_ENTRIES)
        .uring_builder(tokio_uring::uring_builder().setup_cqsize(COMPLETION_QUEUE_ENTRIES));
    b
}

/// Like `tokio_uring::start`, but with [`runtime_builder`]'s settings,
/// returns an error instead of panicking when the runtime (its ring) cannot
/// be created, and releases the reads the runtime's shutdown left behind
/// (see [`release_orphans_after`]) before it returns.
///
/// # Panics
///
/// If `future` panics; or if the finish hook of a read cancelled at
/// shutdown (or a waker it wakes) panics: that panic is resumed here once
/// the runtime is gone and the kernel is done with every read.
pub fn try_start<F: Future>(future: F) -> io::Result<F::Output> {
    probe()?;
    let rt = tokio_uring::Runtime::new(&runtime_builder())
        .map_err(|e| io::Error::new(e.kind(), format!("cannot start tokio-uring: {e}")))?;
    let out = release_orphans_after(move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(future)));
        // The runtime is dropped here, not by the unwinding of a panic of
        // the future: a panic in its drop (a task's) then unwinds alone.
        drop(rt);
        out.unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    Ok(out)
}

/// Runs `f`, which runs a tokio-uring runtime to its end (typically
/// `|| tokio_uring::start(future)`), then releases the reads its shutdown
/// left behind; returns what `f` returns.
///
/// tokio-uring 0.5 frees the data of the operations in flight when its
/// runtime is dropped *before* it waits for their completions (its
/// driver's drop). So this engine never lets tokio-uring release a read:
/// a read whose task is dropped while it is in flight (at shutdown) is kept
/// by the thread, its frames "being read" and its memory allocated, until
/// it is known that the kernel is done with it. That is known when `f`
/// returns: every runtime dropped inside `f` waited for every completion
/// before its drop returned. Then each such read ends as cancelled: its
/// frames go back to empty, and streams waiting for its blocks (on any
/// thread) read them again.
///
/// [`try_start`] does this by itself. A program that starts tokio-uring
/// otherwise should run it inside this function: reads its runtime leaves
/// behind are never released otherwise (they are leaked when the thread
/// exits), and a stream on another thread that waits for one of their
/// blocks waits forever. Reads of a `LocalSet` of the program's own,
/// dropped with reads in flight while the runtime goes on, are kept the
/// same way until `f` returns.
///
/// # Panics
///
/// If `f` panics (the reads left behind are still released first), or if
/// a released read's finish hook (or a waker it wakes) panics: the first
/// of those panics is resumed once every read is released.
///
/// ```no_run
/// let out = pagestream_tokio_uring::release_orphans_after(|| {
///     tokio_uring::start(async {
///         // ... streams of pagestream_tokio_uring ...
///         42
///     })
/// });
/// assert_eq!(out, 42);
/// ```
pub fn release_orphans_after<R>(f: impl FnOnce() -> R) -> R {
    buf::release_orphans_after(f).unwrap_or_else(|p| std::panic::resume_unwind(p))
}
