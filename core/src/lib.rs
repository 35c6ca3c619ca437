//! # pagestream
//!
//! Stream the pages of a file to async code as fast as the storage allows,
//! on any runtime.
//!
//! A caller names the blocks it wants, in the order it wants them, with a
//! [`BlockSource`]. A [`ReadStream`] looks ahead, combines neighbouring blocks
//! into large reads — forward *and* backward — keeps the right number of
//! reads in flight, adapts how far it looks ahead, and hands back each page as
//! a pinned [`PageGuard`] on a shared [`BufferPool`], in source order. It is
//! PostgreSQL's read stream (`src/backend/storage/aio/read_stream.c`,
//! PostgreSQL 17/18) rebuilt as a library whose core knows nothing of any
//! runtime: engines (`pagestream-threadpool`, `pagestream-tokio-uring`,
//! `pagestream-glommio`) bind it to real I/O through the small [`IoEngine`]
//! trait.
//!
//! ```
//! use futures::{executor::block_on, StreamExt};
//! use pagestream::{source, testing::MemEngine, BufferPool, ReadStream};
//!
//! // A shared pool of 256 frames of 8 KiB, an engine and a file.
//! let pool = BufferPool::new(256, 8192)?;
//! let engine = MemEngine::new();
//! let file = engine.create_stamped(1000, 8192);
//!
//! // Every block, newest first: descending runs become one read each.
//! let mut stream = ReadStream::builder(&pool, engine, file)
//!     .max_ios(8)
//!     .io_combine_limit(16)
//!     .build(source::backward(0..1000))?;
//! let sum = block_on(async {
//!     let mut sum = 0u64;
//!     while let Some(page) = stream.next().await {
//!         let page = page?;
//!         sum += u64::from(page[0]);
//!     }
//!     Ok::<_, std::io::Error>(sum)
//! })?;
//! # let _ = sum;
//! println!("{}", stream.stats()); // like EXPLAIN (ANALYZE, BUFFERS)
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The model
//!
//! - **Blocks and pages.** A file is a sequence of `block_size` blocks
//!   (a power of two ≥ 512, default 8192) numbered from 0
//!   ([`BlockNumber`]). A page is a block's bytes in memory.
//! - **The buffer pool** ([`BufferPool`], module [`pool`]) is a fixed set of
//!   4096-aligned frames shared by every stream, with a block table per file
//!   (`block → frame`), pin counts, clock-sweep eviction and an *I/O in
//!   progress* state. A hit costs one atomic load of the block's slot and one
//!   CAS on the frame's own cache line: no lock, nothing pool-wide. A stream that wants a block
//!   another stream is reading waits for that read and never issues its own.
//! - **Pins hold read-ahead pages.** Every page the planner has looked up —
//!   a hit waiting in the queue, a page being read, a finished read-ahead
//!   page the consumer has not taken yet — holds a pin, as in PostgreSQL. A
//!   pinned frame cannot be evicted, so read-ahead work is never lost to
//!   eviction before it is used; the price is that look-ahead consumes
//!   frames, which is why the pin budget is re-checked against what the
//!   pool can spare each time look-ahead runs (each stream may always use
//!   at least its fair share, `frames / live streams`), and why a small pool
//!   makes reads smaller before it makes them fewer. A [`PageGuard`] owns
//!   exactly one pin; dropping it unpins.
//! - **The planner** (a private module; see [`design`]) is the
//!   read-stream state machine: distance, combining, backward runs, advice,
//!   the fast path. The [`design`] module explains the algorithm in full.
//! - **Engines** ([`IoEngine`], module [`engine`]) read into frames they own
//!   until they complete the request; completion publishes frames and wakes
//!   waiters by itself, so it never depends on the issuing stream being
//!   polled or alive. Short reads return their remainder to the engine.
//!   An engine may keep reads it expects the OS page cache to serve in a
//!   queue of its own, copied by a helper thread on another CPU: it then
//!   asks for a few such reads in flight ([`EngineHints::cached_reads`](engine::EngineHints::cached_reads))
//!   and does a queued one on the consumer's thread whenever the stream
//!   would otherwise wait ([`IoEngine::help`]), so the two CPUs share the
//!   copying and the consumer never waits for a sleeping thread.
//! - **Stats** ([`StreamStats`], [`PoolStats`]) explain a run like
//!   `EXPLAIN (ANALYZE, BUFFERS)`: hits, reads, blocks per read, reads in
//!   flight, waits, distance and which limit bound it.
//!
//! # Test engines
//!
//! With the `testing` feature, the `testing` module has an in-memory engine, wrappers
//! that add latency, cap concurrency and inject faults, and the conformance
//! suite every engine's tests run.

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![warn(clippy::clone_on_ref_ptr)]
#![deny(unused_must_use, rustdoc::broken_intra_doc_links)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![cfg_attr(loom, allow(dead_code, unreachable_pub))]

pub mod engine;
mod error;
mod guard;
#[cfg(unix)]
pub mod os;
mod plan;
pub mod pool;
pub mod segmented;
pub mod source;
mod stats;
mod stream;
mod sync;

#[cfg(any(feature = "testing", test))]
pub mod testing;

/// A block's number within its file, from 0.
pub type BlockNumber = u64;

#[cfg(any(feature = "testing", test))]
pub use engine::ReadFilter;
pub use engine::{
    BlockCount, CachedReads, EngineFile, EngineHints, FileId, IoEngine, ReadOutcome, ReadRequest,
};
pub use error::{BuildError, ReadError};
pub use guard::PageGuard;
pub use plan::AdvicePolicy;
pub use pool::{BufferPool, PoolBuilder, RingSize};
pub use source::BlockSource;
pub use stats::{EngineCounters, Limit, PoolStats, StreamStats};
pub use stream::{ReadStream, StreamBuilder, YieldBudget, MAX_IOS, MAX_IO_COMBINE_LIMIT};

/// The README's example, compiled and run as a doc-test.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

#[doc = include_str!("../DESIGN.md")]
pub mod design {}
