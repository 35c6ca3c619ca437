//! # pagestream-object-store
//!
//! A [`pagestream`] engine over [`object_store`]: the pages of an object in
//! S3, GCS, Azure or on an HTTP server, streamed into a shared buffer pool
//! with the look-ahead of a local scan.
//!
//! Object storage is not a disk. Every request costs a round trip (tens of
//! milliseconds), one request streams at tens of MiB/s, and there is no
//! kernel read-ahead, so bandwidth comes from large requests, many in
//! flight, and no request waited on twice. A stream over
//! [`ObjectStoreEngine`] combines up to [`DEFAULT_READ_BYTES`] per GET and
//! keeps up to [`DEFAULT_READS_IN_FLIGHT`] GETs in flight (less where the
//! pool is small: reads shrink before they get fewer), hedges GETs that are
//! slow to answer ([`Hedging`]), and cancels the GETs of a stream that is
//! dropped or reset. The measurements behind the defaults are in the
//! repository's `docs/benchmarks.md`.
//!
//! ```no_run
//! use futures::StreamExt;
//! use pagestream::{source, BufferPool, EngineFile, ReadStream};
//! use pagestream_object_store::ObjectStoreEngine;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Inside a tokio runtime: reads are tasks on it.
//! let engine = ObjectStoreEngine::new()?;
//! // Endpoint and credentials from AWS_ENDPOINT, AWS_ACCESS_KEY_ID, ...
//! let file = engine.open_url("s3://bucket/base/5/16384").await?;
//! let pages = file.byte_len()? / 8192;
//! let pool = BufferPool::new(8192, 8192)?; // 64 MiB
//! let mut stream = ReadStream::builder(&pool, engine, file).build(source::forward(0..pages))?;
//! while let Some(page) = stream.next().await {
//!     let page = page?;
//!     assert_eq!(page.len(), 8192);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The engine runs on tokio (object_store's runtime): build it inside a
//! runtime, or give it a [`Handle`](tokio::runtime::Handle). The stream may
//! be polled by any executor; its reads are tasks on the engine's runtime
//! and complete on their own.

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![warn(clippy::clone_on_ref_ptr, clippy::future_not_send)]
#![deny(unused_must_use, rustdoc::broken_intra_doc_links)]
#![cfg_attr(not(feature = "testing"), forbid(unsafe_code))]

mod engine;
mod file;
mod hedge;
mod url;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use engine::{
    ObjectStoreEngine, ObjectStoreEngineBuilder, ObjectStoreStats, DEFAULT_READS_IN_FLIGHT,
    DEFAULT_READ_BYTES,
};
pub use file::ObjectFile;
pub use hedge::{Hedging, MAX_WAIT, WINDOW};
pub use object_store;
pub use url::is_object_url;
