//! # pagestream
//!
//! <!-- quickstart:begin -->
//! Scan a file with the thread-pool engine under tokio. The stream looks
//! ahead, combines neighbouring blocks into 128 KiB reads, keeps up to 16
//! in flight and hands back each 8 KiB page, in order, pinned in a shared
//! buffer pool:
//!
//! ```rust
//! use futures::StreamExt;
//! use pagestream::{source, BufferPool, EngineFile, ReadStream};
//! use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // The file to scan: the first argument, else this program's executable.
//!     let path = match std::env::args_os().nth(1) {
//!         Some(arg) => arg.into(),
//!         None => std::env::current_exe()?,
//!     };
//!     let pool = BufferPool::new(1024, 8192)?; // 1024 frames of 8 KiB, for every stream
//!     let file = ThreadPoolFile::open(&path)?; // buffered; open_direct for O_DIRECT
//!     let blocks = file.block_count(8192)?.blocks();
//!     let mut pages = ReadStream::builder(&pool, ThreadPoolEngine::new(), file)
//!         .max_ios(16) // reads in flight (PostgreSQL's effective_io_concurrency)
//!         .io_combine_limit(16) // blocks per read (PostgreSQL's io_combine_limit)
//!         .short_last_page(true) // a partial last block is a short page
//!         .build(source::forward(0..blocks))?;
//!     let mut bytes = 0;
//!     while let Some(page) = pages.next().await {
//!         let page = page?; // derefs to the page's bytes; an error names its block
//!         bytes += page.len();
//!     }
//!     println!("{bytes} bytes in {blocks} blocks\n{}", pages.stats());
//!     Ok(())
//! }
//! ```
//! <!-- quickstart:end -->
//!
//! This crate is the engine-independent core: the buffer pool, the
//! look-ahead planner (PostgreSQL's read stream, `read_stream.c`), the
//! [`ReadStream`] and the [`IoEngine`] contract. It names no runtime; an
//! engine crate binds it to real I/O:
//!
//! | crate | reads with | runs under |
//! | --- | --- | --- |
//! | `pagestream-threadpool` | `preadv` on its own threads, native AIO for O_DIRECT | any executor |
//! | `pagestream-uring` | its own io_uring driver | `UringRuntime::block_on`, one thread |
//! | `pagestream-tokio-uring` | io_uring through tokio-uring | `tokio_uring::start` |
//! | `pagestream-glommio` | glommio DMA files (O_DIRECT) | a glommio executor |
//!
//! # The pieces
//!
//! - A [`BlockSource`] names the blocks, in the order the caller wants
//!   them, with optional per-block data: ranges forward or backward,
//!   iterators, parallel workers and synchronized scans ([`source`]), a
//!   relation's segment files as one file ([`segmented`]).
//! - A [`BufferPool`] is a fixed set of frames shared by every stream, with
//!   pins and clock-sweep eviction ([`pool`]). A [`PageGuard`] holds one pin;
//!   dropping it unpins.
//! - A [`ReadStream`], made by a [`StreamBuilder`], is a
//!   `futures::Stream<Item = io::Result<PageGuard<D>>>`.
//! - [`StreamStats`] and [`PoolStats`] explain a run as
//!   `EXPLAIN (ANALYZE, BUFFERS)` does: hits, reads, blocks per read, reads
//!   in flight, waits, distance and what bound it.
//!
//! How the stream decides what to read, and what the pool and the engine
//! contract guarantee, is in the [`design`] module: the algorithm is
//! written there once.
//!
//! # Features
//!
//! - `testing`: the `testing` module — an in-memory engine, wrappers that
//!   add latency, cap concurrency, stall or inject faults, and the
//!   conformance suite every engine's tests run.
//! - `tokio`: the stream also spends tokio's cooperative budget and yields
//!   as `tokio::task::yield_now` does (see
//!   [`StreamBuilder::yield_budget`]).

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![warn(clippy::clone_on_ref_ptr)]
#![deny(unused_must_use, rustdoc::broken_intra_doc_links)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![cfg_attr(pagestream_loom, allow(dead_code, unreachable_pub))]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod engine;
mod error;
mod guard;
#[cfg(all(test, pagestream_loom))]
mod loom_stream_tests;
#[cfg(unix)]
#[cfg_attr(docsrs, doc(cfg(unix)))]
pub mod os;
mod plan;
pub mod pool;
pub mod segmented;
pub mod source;
mod stats;
mod stream;
mod sync;

#[cfg(any(feature = "testing", test))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

/// A block's number within its file, from 0.
pub type BlockNumber = u64;

#[cfg(any(feature = "testing", test))]
pub use engine::ReadFilter;
pub use engine::{
    Abandoned, BlockCount, CachedReads, EngineFile, EngineHints, FileId, IoEngine, ReadOutcome,
    ReadRequest, MAX_BUFFERS,
};
pub use error::{BuildError, ReadError};
pub use guard::PageGuard;
pub use plan::AdvicePolicy;
pub use pool::{BufferPool, PoolBuilder, RingSize};
pub use source::BlockSource;
pub use stats::{EngineCounters, Limit, PoolStats, StreamStats};
pub use stream::{
    ReadStream, StreamBuilder, YieldBudget, DEFAULT_BACKWARD_READAHEAD, MAX_IOS,
    MAX_IO_COMBINE_LIMIT,
};

#[doc = include_str!("../../docs/design.md")]
pub mod design {}
