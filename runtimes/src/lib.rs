//! # pagestream-runtimes
//!
//! Start any of pagestream's runtimes with its engine and run one workload
//! on it, so that an example, a test or a benchmark is written once and runs
//! everywhere.
//!
//! | [`Runtime`] | name | executor | engine | files |
//! | --- | --- | --- | --- | --- |
//! | [`Runtime::ThreadPool`] | `threadpool` | `futures::executor::block_on` on a fresh thread | `ThreadPoolEngine` (blocking `preadv` on I/O threads) | buffered or `O_DIRECT` |
//! | [`Runtime::TokioUring`] | `tokio-uring` | `tokio_uring` runtime (`try_start`) on a fresh thread | `TokioUringEngine` (io_uring straight into frames) | buffered or `O_DIRECT` |
//! | [`Runtime::Glommio`] | `glommio` | glommio `LocalExecutor` from `make_executor` on a fresh thread | `GlommioEngine` (DMA reads, copied into frames) | `O_DIRECT` only |
//! | [`Runtime::Uring`] | `uring` | `UringRuntime::block_on` (pagestream-uring's own io_uring driver) on a fresh thread | `UringEngine` (io_uring straight into frames, submitted as reads start) | buffered or `O_DIRECT` |
//! | [`Runtime::UringTokio`] | `uring-tokio` | multi-thread tokio runtime ([`Options::workers`] workers), the workload in its `block_on` on a fresh thread, or spawned on its workers ([`Runtime::spawn`]) | `UringTokioEngine` (pagestream-uring's driver from tokio: reads submitted as streams start them, completions reaped by the stream or a reaper task on the runtime) | buffered or `O_DIRECT` |
//! | [`Runtime::ObjectStore`] | `object-store` | multi-thread tokio runtime ([`OBJECT_STORE_WORKERS`] workers), the workload in its `block_on` on a fresh thread | `ObjectStoreEngine` (range GETs through `object_store`, hedged, many in flight) | objects by URL: `s3://bucket/key`, `http(s)://host/path` |
//!
//! [`Runtime::ALL`] (and `all` on a command line) is the five runtimes that
//! read local files; [`Runtime::EVERY`] adds object-store, which opens the
//! path it is given as a URL and refuses a local path (and `O_DIRECT`) with
//! an error naming it. [`Runtime::for_url`] picks it for a URL. An `s3://`
//! URL takes its endpoint, region and credentials from the standard `AWS_*`
//! environment variables (`AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`).
//!
//! A [`Workload`] is a value whose [`run`](Workload::run) is generic over an
//! [`Env`]: the environment gives the runtime's engine ([`Env::engine`]),
//! opens files for it ([`Env::open`], buffered or `O_DIRECT` with a block
//! size, see [`FileOptions`]) and reports the engine's counters
//! ([`Env::engine_counters`]). [`Runtime::run`] starts the runtime on a
//! fresh thread, runs the workload's future there to completion and returns
//! its output (which must be `Send`; the future itself need not be, which
//! glommio requires). Create the [`BufferPool`](pagestream::BufferPool)
//! inside the workload: it then lives on the runtime's thread, as glommio
//! requires (one pool per executor).
//!
//! # Spawned workloads
//!
//! A tokio program spawns its scans as tasks on a multi-thread runtime, and
//! a task's future must be `Send`. A [`SpawnWorkload`] is written against
//! [`SendEnv`] (an [`Env`] whose engine and files are `Send + Sync`) and
//! returns a `Send` future; [`Runtime::spawn`] runs it in a task on the
//! runtime's workers, on the runtimes that [`spawn`](Runtime::spawns):
//! `uring-tokio` and `threadpool` (the thread-pool engine under tokio).
//! This is `uring-tokio`'s fast path. [`Runtime::run`] polls a workload in
//! `block_on` on a thread of its own instead, as the body of
//! `#[tokio::main]` is polled: on `uring-tokio` every completion the
//! reaper takes on a worker then wakes that thread, a cross-thread wake-up
//! per read that the stream did not complete itself.
//!
//! A runtime that cannot start (io_uring disabled or blocked by seccomp,
//! `RLIMIT_MEMLOCK` too low for glommio) is a [`RuntimeError`], not a panic.
//! A panic inside the workload is resumed on the calling thread.
//!
//! ```no_run
//! use futures::StreamExt;
//! use pagestream::{source, BufferPool, EngineFile, ReadStream};
//! use pagestream_runtimes::{Env, FileOptions, Runtime, Workload};
//! use std::path::PathBuf;
//!
//! /// Counts the pages of a file, on any runtime.
//! struct CountPages(PathBuf);
//!
//! impl Workload for CountPages {
//!     type Output = std::io::Result<u64>;
//!
//!     async fn run<E: Env>(self, env: E) -> std::io::Result<u64> {
//!         let file = env.open(&self.0, FileOptions::direct(8192)).await?;
//!         let nblocks = file.byte_len()? / 8192;
//!         let pool = BufferPool::new(1024, 8192)?;
//!         let mut pages = ReadStream::builder(&pool, env.engine(), file)
//!             .build(source::forward(0..nblocks))?;
//!         let mut n = 0;
//!         while let Some(page) = pages.next().await {
//!             page?;
//!             n += 1;
//!         }
//!         Ok(n)
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! for rt in Runtime::ALL {
//!     let pages = rt.run(CountPages("table.dat".into()))??;
//!     println!("{rt}: {pages} pages");
//! }
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
#![allow(async_fn_in_trait, clippy::future_not_send)]
#![deny(unused_must_use, rustdoc::broken_intra_doc_links)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod env;
mod runtime;

pub use env::{GlommioEnv, ObjectStoreEnv, ThreadPoolEnv, TokioUringEnv, UringEnv, UringTokioEnv};
pub use pagestream_object_store::is_object_url;
pub use runtime::{
    object_store_tokio, parse_list, ParseRuntimeError, Runtime, RuntimeError, OBJECT_STORE_WORKERS,
    TOKIO_WORKERS,
};

use pagestream::{EngineFile, IoEngine};
use std::future::Future;
use std::io;
use std::path::Path;

/// How to open a file for a runtime's engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOptions {
    /// Open with `O_DIRECT` (bypass the OS page cache). glommio reads with
    /// `O_DIRECT` only and refuses buffered opens.
    pub direct: bool,
    /// The block size of the pools the file will be read with (checked
    /// against the file's `O_DIRECT` alignment when `direct`).
    pub block_size: usize,
}

impl FileOptions {
    /// Buffered (through the OS page cache), for pools of `block_size`.
    pub fn buffered(block_size: usize) -> Self {
        FileOptions {
            direct: false,
            block_size,
        }
    }

    /// `O_DIRECT`, for pools of `block_size`.
    pub fn direct(block_size: usize) -> Self {
        FileOptions {
            direct: true,
            block_size,
        }
    }
}

/// Settings of the runtimes' engines, for [`Runtime::run_with`]. Settings
/// that do not apply to a runtime are ignored by it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Thread pool: most I/O threads (default
    /// [`pagestream_threadpool::DEFAULT_THREADS`]).
    pub threads: usize,
    /// Thread pool, uring and uring-tokio: try an inline `RWF_NOWAIT` read
    /// first on buffered files (default on).
    pub nowait: bool,
    /// Thread pool: cached reads in flight per stream with the cached-read
    /// helper thread (`None`: the engine's default; see
    /// [`pagestream_threadpool::ThreadPoolBuilder::cached_reads`]; 0 or 1: no helper).
    pub cached_depth: Option<usize>,
    /// uring-tokio, and every [`Runtime::spawn`]: worker threads of the
    /// multi-thread tokio runtime (default [`TOKIO_WORKERS`]; 0 is taken as 1).
    pub workers: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: pagestream_threadpool::DEFAULT_THREADS,
            nowait: true,
            cached_depth: None,
            workers: TOKIO_WORKERS,
        }
    }
}

impl Options {
    /// Thread pool: most I/O threads.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n;
        self
    }

    /// Thread pool, uring and uring-tokio: the inline `RWF_NOWAIT` attempt
    /// on or off.
    pub fn nowait(mut self, on: bool) -> Self {
        self.nowait = on;
        self
    }

    /// Thread pool: cached reads in flight per stream with the cached-read
    /// helper (`None`: the engine's default; 0 or 1: no helper).
    pub fn cached_depth(mut self, reads: Option<usize>) -> Self {
        self.cached_depth = reads;
        self
    }

    /// uring-tokio and [`Runtime::spawn`]: tokio worker threads.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }
}

/// An engine's counters by name: see [`pagestream::EngineCounters`].
pub use pagestream::EngineCounters;

/// What a workload gets from the runtime it runs on: the engine, and a way
/// to open files for it. Implemented by [`ThreadPoolEnv`],
/// [`TokioUringEnv`], [`GlommioEnv`], [`UringEnv`], [`UringTokioEnv`] and
/// [`ObjectStoreEnv`]; a
/// workload is written against this trait and so runs on all of them.
pub trait Env {
    /// The runtime's engine.
    type Engine: IoEngine<File = Self::File> + Clone + 'static;
    /// The engine's file handle.
    type File: EngineFile + Clone + 'static;

    /// Which runtime this is.
    fn runtime(&self) -> Runtime;

    /// A handle on the runtime's engine (clones share its state and counters).
    fn engine(&self) -> Self::Engine;

    /// Opens `path` for the engine. Fails with
    /// [`io::ErrorKind::Unsupported`] for a buffered open on glommio, and
    /// with [`io::ErrorKind::InvalidInput`] when `direct` and the block size
    /// does not meet the file's `O_DIRECT` alignment. On object-store,
    /// `path` is an object URL: a local path is
    /// [`io::ErrorKind::InvalidInput`], `direct`
    /// [`io::ErrorKind::Unsupported`], a missing object
    /// [`io::ErrorKind::NotFound`], each naming the URL.
    fn open(&self, path: &Path, opts: FileOptions) -> impl Future<Output = io::Result<Self::File>>;

    /// Like [`open`](Env::open), for synchronous callers on the runtime's
    /// thread (a conformance `Harness` makes files in a synchronous method).
    /// On glommio, whose files open asynchronously, the file is opened by a
    /// helper executor on another thread (started on first use, ending with
    /// this environment) and adopted here; on object-store the `HEAD` runs
    /// on the tokio runtime's workers while this thread waits.
    fn open_blocking(&self, path: &Path, opts: FileOptions) -> io::Result<Self::File>;

    /// The engine's counters so far.
    fn engine_counters(&self) -> EngineCounters;

    /// Registers `pool`'s memory with the engine, where the engine can
    /// (the `uring` and `uring-tokio` runtimes: io_uring fixed buffers, see
    /// `pagestream_uring::UringEngine::register_pool`; one pool per
    /// engine). Returns whether it did: `Ok(false)` on the other runtimes.
    fn register_pool(&self, pool: &pagestream::BufferPool) -> io::Result<bool> {
        let _ = pool;
        Ok(false)
    }
}

/// Something to run on any runtime: see the [crate docs](crate).
///
/// The value is moved to the runtime's thread (hence `Send`); its future is
/// created and polled there and need not be `Send`. It may borrow from the
/// caller: [`Runtime::run`] waits for it.
pub trait Workload: Send {
    /// What the workload returns to the caller of [`Runtime::run`].
    type Output: Send;

    /// Runs the workload on the runtime `env` belongs to.
    fn run<E: Env>(self, env: E) -> impl Future<Output = Self::Output>;
}

/// An [`Env`] that may move between threads, with an engine and files that
/// may too: what a [`SpawnWorkload`] gets. Implemented by [`UringTokioEnv`]
/// and [`ThreadPoolEnv`].
///
/// The futures of [`Env::open`] are not known to be `Send` in generic code:
/// a spawned workload opens its files with [`Env::open_blocking`] (which on
/// these runtimes is what `open` does).
pub trait SendEnv:
    Env<Engine: Send + Sync, File: Send + Sync> + Clone + Send + Sync + 'static
{
}

/// A workload run in a task spawned on a multi-thread tokio runtime
/// ([`Runtime::spawn`]): like [`Workload`], with a `Send` future that owns
/// what it uses (`'static`), as `tokio::spawn` requires.
pub trait SpawnWorkload: Send + 'static {
    /// What the workload returns to the caller of [`Runtime::spawn`].
    type Output: Send + 'static;

    /// Runs the workload on the runtime `env` belongs to, in a task on its
    /// workers.
    fn run<E: SendEnv>(self, env: E) -> impl Future<Output = Self::Output> + Send;
}
