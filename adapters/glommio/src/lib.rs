//! # pagestream-glommio
//!
//! A [`pagestream`] engine on [glommio] DMA files (`O_DIRECT`), for
//! thread-per-core programs.
//!
//! - [`GlommioEngine`]: the engine. [`IoEngine::start_read`] spawns a
//!   detached local task (`glommio::spawn_local`) that reads the request's
//!   byte range with `DmaFile::read_at_aligned`, copies it into the frames
//!   and completes the request, re-reading any short read's remainder.
//!   Reads thus complete on their own (an abandoned stream never holds up
//!   another waiting for the same block), and the kernel never writes into
//!   frames, so a read can be abandoned at any time (pagestream's engine
//!   contract: [`pagestream::design`] §5), glommio's leaked tasks included
//!   (below).
//! - [`GlommioFile`]: a glommio `DmaFile`; [`GlommioFile::open`] checks the
//!   block size against the file's `O_DIRECT` alignment and fails with
//!   `InvalidInput` naming both.
//! - [`cancel_reads_in_flight`]: glommio leaks tasks still waiting for I/O
//!   when an executor is dropped; call this after `LocalExecutor::run`
//!   returns if a pool outlives the executor, so no frame stays "being
//!   read" forever (thread exit does it by itself).
//! - [`settle_reads`]: awaited at the end of the executor's main future,
//!   waits for the reads still in flight, whose leaked tasks would
//!   otherwise keep their files open.
//! - [`make_executor`], [`executor_builder`], [`fit_io_memory`]: a glommio
//!   executor whose `io_memory` fits `RLIMIT_MEMLOCK`, or a clear error
//!   naming `RLIMIT_MEMLOCK` and `io_memory` where glommio would refuse to
//!   start (or quietly fall back to unregistered buffers).
//!
//! # The copy, and when reads reach the kernel
//!
//! glommio 0.9 cannot read into memory it does not own: its reads return a
//! `ReadResult` over a `DmaBuffer` that glommio allocates (from `io_memory`,
//! else the heap). So each read lands in glommio's buffer and is copied into
//! the pool's frames — one `memcpy` of every byte read, on the executor's
//! thread, about a tenth of a core-second per GiB. [`GlommioEngine::stats`]
//! counts the bytes copied and the time spent copying. glommio also hands
//! its queued reads to the kernel once per scheduler loop, so a stream's
//! reads of one wake-up go out together. For zero-copy io_uring reads use
//! `pagestream-uring` or `pagestream-tokio-uring`; the measurements behind
//! this, and the executor settings that do not help, are in the
//! repository's `docs/engines.md`.
//!
//! # One pool per executor
//!
//! Everything here is `!Send` and lives on the executor that made it: reads
//! complete on that executor's thread, so the streams' wakers (glommio
//! tasks) are woken from their own thread. Use a pool with glommio streams
//! of one executor only (thread-per-core: one pool per core). If a pool
//! were shared with streams on other threads, a read completed there would
//! wake a glommio task from a foreign thread; glommio 0.9 routes such a wake
//! through its cross-thread notifier instead of panicking, but that is a
//! slow path this crate does not rely on or test.
//!
//! ```no_run
//! use futures::StreamExt;
//! use pagestream::{source, BufferPool, ReadStream};
//! use pagestream_glommio::{make_executor, GlommioEngine, GlommioFile};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ex = make_executor()?; // io_memory sized to RLIMIT_MEMLOCK
//! ex.run(async {
//!     let pool = BufferPool::new(1024, 8192)?;
//!     let file = GlommioFile::open("table.dat", 8192).await?;
//!     let mut pages = ReadStream::builder(&pool, GlommioEngine::new(), file)
//!         .build(source::forward(0..1000))?;
//!     while let Some(page) = pages.next().await {
//!         let _page = page?;
//!     }
//!     Ok::<_, std::io::Error>(())
//! })?;
//! # Ok(())
//! # }
//! ```
//!
//! [glommio]: https://docs.rs/glommio/0.9

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![warn(clippy::clone_on_ref_ptr)]
#![allow(clippy::future_not_send)]
#![deny(unused_must_use, rustdoc::broken_intra_doc_links)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod engine;
mod executor;
mod file;
mod sys;

pub use engine::{cancel_reads_in_flight, settle_reads, EngineStats, GlommioEngine};
pub use executor::{
    executor_builder, fit_io_memory, make_executor, DEFAULT_IO_MEMORY, GLOMMIO_MIN_IO_MEMORY,
    GLOMMIO_MIN_MEMLOCK,
};
pub use file::GlommioFile;

#[cfg(doc)]
use pagestream::IoEngine;
