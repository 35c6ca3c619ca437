//! # pagestream-uring
//!
//! A [`pagestream`] engine on its own io_uring driver: every read is one
//! io_uring operation the kernel performs straight into the pool's frames,
//! submitted the moment the stream starts it, and completed by the thread
//! that waits for it inside `io_uring_enter`, with no scheduler, `epoll` or
//! task between a completion and the next submission. A buffered read the
//! OS page cache holds is copied by the thread that starts it instead
//! (`preadv2(RWF_NOWAIT)`, the builders' `nowait`), and only what the cache
//! does not hold goes to the ring.
//!
//! - [`UringRuntime`]: a one-future executor with its ring.
//!   [`block_on`](UringRuntime::block_on) polls the future; when it waits,
//!   the thread takes finished reads from the completion queue (shared
//!   memory), and when there are none it waits for one in the kernel,
//!   submitting whatever is queued in the same system call. Wake-ups from
//!   other threads end that wait through an `eventfd` the ring polls.
//! - [`UringEngine`]: the engine (from [`UringRuntime::engine`]). A read the
//!   ring takes is a `READ` into adjacent frames or a `READV` with a buffer
//!   per frame
//!   ([`op::ReadOp`]); a short read's remainder is submitted again as soon
//!   as its completion is reaped. Reads complete on their own (an abandoned
//!   stream never holds up another waiting for the same block:
//!   `block_on` waits for every read in flight before it returns), and a
//!   runtime dropped with reads in flight cancels them and waits for the
//!   kernel before their frames go back to empty.
//! - [`UringTokioEngine`] (feature `tokio`): the same driver used from any
//!   tokio runtime, multi-thread or current-thread, by many tasks at once.
//!   One ring per engine; a read is submitted by the stream that starts
//!   it, and completed by that stream when it next polls or by a reaper
//!   task woken through tokio's reactor (no thread of its own, no busy
//!   polling). Streams are `Send`.
//! - [`UringFile`]: an open file, buffered or `O_DIRECT`
//!   ([`UringFile::open_direct`] checks the block size against the file
//!   system's alignment and fails with `InvalidInput` naming both). Shared
//!   with `pagestream-tokio-uring`, which re-exports it as `TokioUringFile`
//!   and submits the same [`op::ReadOp`]s through tokio-uring's ring.
//!
//! Why a driver of our own when tokio-uring and glommio exist: both put a
//! scheduler between a completion and the next submission (tokio-uring
//! learns of completions through tokio's `epoll` and completes each read in
//! a task; glommio flushes its queue once per scheduler loop), which keeps
//! random reads below fio at some depths. This driver does what fio does:
//! each read is submitted as the stream starts it, and completions are
//! taken where the thread waits for them; memory handed to the kernel stays
//! alive until the kernel is done with it, also when the runtime is dropped
//! with reads in flight. The measurements are in the repository's
//! `docs/engines.md`.
//!
//! Either engine can register a pool's memory with its ring as fixed
//! buffers ([`UringEngine::register_pool`]): reads into it are then
//! `READ_FIXED`s, which spares the kernel mapping the frames on every read.
//!
//! Use [`UringRuntime`] where a thread can be given to a scan (a scan
//! program, a worker per core), and [`UringTokioEngine`] from tokio code.
//! Where io_uring is unavailable, both fail at construction with an error
//! naming the likely cause ([`probe`] checks up front); fall back to
//! `pagestream-threadpool` then.
//!
//! ```no_run
//! use futures::StreamExt;
//! use pagestream::{source, BufferPool, ReadStream};
//! use pagestream_uring::{UringFile, UringRuntime};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = UringRuntime::new()?;
//! let file = UringFile::open_direct("table.dat", 8192)?;
//! let pool = BufferPool::new(1024, 8192)?;
//! let sum = rt.block_on(async {
//!     let mut pages = ReadStream::builder(&pool, rt.engine(), file)
//!         .build(source::forward(0..1000))?;
//!     let mut sum = 0u64;
//!     while let Some(page) = pages.next().await {
//!         sum += u64::from(page?[0]);
//!     }
//!     Ok::<_, std::io::Error>(sum)
//! })?;
//! println!("{sum}");
//! # Ok(())
//! # }
//! ```

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![warn(clippy::clone_on_ref_ptr)]
#![deny(unused_must_use, rustdoc::broken_intra_doc_links)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod driver;
mod file;
pub mod op;
mod runtime;
#[cfg(feature = "tokio")]
mod tokio;

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use crate::tokio::{UringTokioBuilder, UringTokioEngine};
pub use driver::EngineStats;
pub use file::UringFile;
pub use runtime::{UringBuilder, UringEngine, UringRuntime, DEFAULT_CQ_ENTRIES, DEFAULT_ENTRIES};

use std::io;

/// Checks that io_uring can be used by this process by setting up (and
/// tearing down) a two-entry ring.
///
/// Fails with an error naming the likely cause — `sysctl
/// kernel.io_uring_disabled`, a seccomp filter (containers), an old kernel —
/// and the underlying OS error, instead of failing later.
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
