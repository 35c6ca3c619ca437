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
//!   frames, so a read can be abandoned at any time; the comment at the top
//!   of `src/engine.rs` explains how this keeps pagestream's engine contract
//!   (DESIGN §3), including glommio's leaked tasks.
//! - [`GlommioFile`]: a glommio `DmaFile`; [`GlommioFile::open`] checks the
//!   block size against the file's `O_DIRECT` alignment and fails with
//!   `InvalidInput` naming both.
//! - [`cancel_reads_in_flight`]: glommio leaks tasks still waiting for I/O
//!   when an executor is dropped; call this after `LocalExecutor::run`
//!   returns if a pool outlives the executor, so no frame stays "being
//!   read" forever (thread exit does it by itself).
//! - [`make_executor`], [`executor_builder`], [`fit_io_memory`]: a glommio
//!   executor whose `io_memory` fits `RLIMIT_MEMLOCK`, or a clear error
//!   naming `RLIMIT_MEMLOCK` and `io_memory` where glommio would refuse to
//!   start (or quietly fall back to unregistered buffers).
//!
//! # The copy
//!
//! glommio 0.9 cannot read into memory it does not own: its reads return a
//! `ReadResult` over a `DmaBuffer` that glommio allocates (from `io_memory`,
//! else the heap), and `DmaBuffer` has no public constructor over foreign
//! memory. So each read lands in glommio's buffer and is copied into the
//! pool's frames — one `memcpy` of every byte read, on the executor's
//! thread. [`GlommioEngine::stats`] counts the bytes copied and the time
//! spent copying.
//!
//! Measured on the development machine (2 vCPUs, ext4 on virtio, release
//! build, a 256 MiB `O_DIRECT` forward scan with 8 KiB blocks, `max_ios`
//! 16), with
//! `cargo run --release -p pagestream-glommio --example copy_cost 256 16`
//! (and `… 256 64`):
//!
//! | reads of | scan          | copy          | copy share of wall time |
//! |----------|---------------|---------------|-------------------------|
//! | 16 blocks | 0.8–0.9 GiB/s | 8.4–9.0 GiB/s | ≈ 10 %                 |
//! | 64 blocks | 0.6 GiB/s     | 6.8 GiB/s     | ≈ 9 %                  |
//!
//! The copy runs on the executor's thread, in series with everything else
//! on it, so it costs about a tenth of a core-second per GiB at these
//! speeds; at device speeds beyond a few GiB/s it would become the limit.
//! For zero-copy io_uring reads use `pagestream-tokio-uring`.
//!
//! # Reads go to the kernel once per scheduler loop
//!
//! glommio queues every I/O a task asks for and hands the queue to the
//! kernel at the top of its next scheduler loop, after every runnable task
//! has run (0.9 has no public way to submit sooner). A stream's reads of
//! one wake-up therefore go out in one `io_uring_enter` once it has handed
//! out its ready pages, and on a device that completes a batch together
//! (the development VM's virtio disk) they come back together: the device
//! idles while the executor turns them round. Measured on cold random
//! 8 KiB `O_DIRECT` reads at `max_ios` 16 (`strace`: 2047 submissions of
//! exactly 16 reads for 32768; `/proc/diskstats`: 0.47 ms a request
//! against fio's 0.31 ms), the same for glommio's own `DmaFile::read_many`
//! (pagestream-bench's `glommio-stream`). `pagestream-tokio-uring`, whose
//! small submission queue sends the first reads of a wake-up while the
//! rest are being started, does not run in that lock-step.
//!
//! The executor settings that could change this were measured and are not
//! used (cold random 8 KiB `O_DIRECT`, 256 MiB file, development VM):
//!
//! - `LocalExecutorBuilder::preempt_timer` of 20 µs or 50 µs (to end a
//!   scheduler loop, and so submit, while a wake-up's reads are still being
//!   started) hangs glommio 0.9: at 20 µs the executor slept in
//!   `io_uring_enter` (`io_cqring_wait`, 0% CPU) with reads outstanding
//!   for 15 minutes until killed; at 50 µs a run did not finish in 40 s
//!   (a few seconds otherwise). 200 µs runs but changes nothing
//!   (244 MiB/s, 0.41 ms a request on the device, at `max_ios` 16).
//! - `spin_before_park` (500 µs): no change (3 interleaved rounds, ratio to
//!   fio 0.85 vs 0.82 at `max_ios` 1, 1.17 vs 1.17 at 16). The executor
//!   hardly parks anyway: at `max_ios` 1, `strace` counts 463
//!   `membarrier` (parks) and about four `io_uring_enter` a read for 32768
//!   reads: two on the main ring (of 3 and 1 SQEs) and two on the latency
//!   ring (1 SQE each). Per glommio's source, every scheduler loop re-arms
//!   its preemption timers (a timeout on the latency ring, a throughput
//!   timer and the old one's cancellation on the main ring), and there are
//!   two loops a read. The gap at depth 1 is on the CPU side, not the
//!   device's (CPU 90 µs a page against fio's 57; device time about equal,
//!   0.10 ms a request).
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

pub use engine::{cancel_reads_in_flight, EngineStats, GlommioEngine};
pub use executor::{
    executor_builder, fit_io_memory, make_executor, DEFAULT_IO_MEMORY, GLOMMIO_MIN_IO_MEMORY,
    GLOMMIO_MIN_MEMLOCK,
};
pub use file::GlommioFile;

#[cfg(doc)]
use pagestream::IoEngine;
