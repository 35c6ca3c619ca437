//! # pagestream-threadpool
//!
//! A [`pagestream`] engine that reads with blocking `preadv` on a pool of
//! dedicated I/O threads, so streams work under any executor (`futures`'
//! `block_on`, tokio, async-std, …) and are `Send`.
//!
//! - [`ThreadPoolEngine`]: the engine. Each read is first tried inline with
//!   `preadv2(RWF_NOWAIT)` on buffered files: a page-cache hit completes on
//!   the calling thread without a thread hop and is reported to the stream
//!   as served from cache (so the planner keeps a warm scan to one
//!   full-sized read at a time). What would block goes to an I/O thread,
//!   which reads straight into the pool's frames and completes the request
//!   there; completion wakes the stream from that thread. Reads the planner
//!   advised just before starting them are already being read by the
//!   kernel, so they may queue for a thread busy with another such read
//!   rather than start one each; an idle thread is always woken for them
//!   (see [`EngineStats::queued_primed`]).
//!   Aligned O_DIRECT reads are submitted inline with Linux native AIO
//!   (`io_submit`) and completed by one reaper thread, not a thread each
//!   ([`ThreadPoolBuilder::aio`]); where the kernel gives the engine no
//!   AIO, those reads go to the I/O threads and
//!   [`EngineStats::aio_unavailable`] says why. Callers that own the polling thread
//!   may read inline, blocking, instead of hopping to a thread
//!   ([`BlockingReads::CallingThread`]: for `max_ios = 0`).
//! - [`ThreadPoolFile`]: an open file, buffered or `O_DIRECT`, optionally
//!   with `POSIX_FADV_RANDOM` (kernel read-ahead off). Buffered files accept
//!   `POSIX_FADV_WILLNEED` advice from the planner; `O_DIRECT` files never
//!   get advice (the planner keeps reads in flight instead).
//!
//! Under `O_DIRECT` every read must be aligned to the file system's direct
//! I/O alignment: [`ThreadPoolFile::open_direct`] checks the block size at
//! open, and a misaligned read fails with [`std::io::ErrorKind::InvalidInput`]
//! rather than reaching the kernel.

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![warn(clippy::clone_on_ref_ptr)]
#![deny(unused_must_use, rustdoc::broken_intra_doc_links)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod engine;
mod file;
mod sync;
mod sys;

pub use engine::{
    BlockingReads, EngineStats, ThreadPoolBuilder, ThreadPoolEngine, DEFAULT_AIO_EVENTS,
    DEFAULT_CACHED_DEPTH, DEFAULT_THREADS,
};
pub use file::{FileAdvice, OpenOptions, ThreadPoolFile};
