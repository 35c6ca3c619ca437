//! The [`Env`]s: what a workload gets on each runtime.

use crate::{EngineCounters, Env, FileOptions, Options, Runtime};
use glommio::io::{DmaFile, OwnedDmaFile};
use glommio::{LocalExecutorBuilder, Placement};
use pagestream_glommio::{GlommioEngine, GlommioFile, GLOMMIO_MIN_IO_MEMORY};
use pagestream_object_store::{is_object_url, ObjectFile, ObjectStoreEngine};
use pagestream_threadpool::{OpenOptions, ThreadPoolEngine, ThreadPoolFile};
use pagestream_tokio_uring::{TokioUringEngine, TokioUringFile};
use pagestream_uring::{UringEngine, UringFile, UringTokioEngine};
use std::cell::RefCell;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// The thread-pool runtime's environment: a [`ThreadPoolEngine`] built from
/// the run's [`Options`]; files are [`ThreadPoolFile`]s.
#[derive(Debug, Clone)]
pub struct ThreadPoolEnv {
    engine: ThreadPoolEngine,
}

impl ThreadPoolEnv {
    pub(crate) fn new(options: &Options) -> Self {
        let mut b = ThreadPoolEngine::builder()
            .threads(options.threads.max(1))
            .nowait(options.nowait);
        if let Some(d) = options.cached_depth {
            // The command line's 0 or 1: no helper.
            b = b.cached_reads(if d < 2 {
                pagestream::CachedReads::One
            } else {
                pagestream::CachedReads::InFlight(d)
            });
        }
        ThreadPoolEnv { engine: b.build() }
    }

    /// The engine's own statistics.
    pub fn stats(&self) -> pagestream_threadpool::EngineStats {
        self.engine.stats()
    }
}

impl Env for ThreadPoolEnv {
    type Engine = ThreadPoolEngine;
    type File = ThreadPoolFile;

    fn runtime(&self) -> Runtime {
        Runtime::ThreadPool
    }

    fn engine(&self) -> ThreadPoolEngine {
        self.engine.clone()
    }

    async fn open(&self, path: &Path, opts: FileOptions) -> io::Result<ThreadPoolFile> {
        self.open_blocking(path, opts)
    }

    fn open_blocking(&self, path: &Path, opts: FileOptions) -> io::Result<ThreadPoolFile> {
        ThreadPoolFile::open_with(
            path,
            OpenOptions::new()
                .direct(opts.direct)
                .block_size(opts.block_size),
        )
    }

    fn engine_counters(&self) -> EngineCounters {
        self.engine.stats().counters()
    }
}

/// The tokio-uring runtime's environment: a [`TokioUringEngine`]; files are
/// [`TokioUringFile`]s. Streams are polled inside the runtime's thread.
#[derive(Debug, Clone)]
pub struct TokioUringEnv {
    engine: TokioUringEngine,
}

impl TokioUringEnv {
    pub(crate) fn new() -> io::Result<Self> {
        Ok(TokioUringEnv {
            engine: TokioUringEngine::new()?,
        })
    }

    /// The engine's own statistics.
    pub fn stats(&self) -> pagestream_tokio_uring::EngineStats {
        self.engine.stats()
    }
}

impl Env for TokioUringEnv {
    type Engine = TokioUringEngine;
    type File = TokioUringFile;

    fn runtime(&self) -> Runtime {
        Runtime::TokioUring
    }

    fn engine(&self) -> TokioUringEngine {
        self.engine.clone()
    }

    async fn open(&self, path: &Path, opts: FileOptions) -> io::Result<TokioUringFile> {
        self.open_blocking(path, opts)
    }

    fn open_blocking(&self, path: &Path, opts: FileOptions) -> io::Result<TokioUringFile> {
        open_uring_file(path, opts)
    }

    fn engine_counters(&self) -> EngineCounters {
        self.engine.stats().counters()
    }
}

/// Opens a file for either io_uring engine (`TokioUringFile` is `UringFile`).
fn open_uring_file(path: &Path, opts: FileOptions) -> io::Result<UringFile> {
    if opts.direct {
        UringFile::open_direct(path, opts.block_size)
    } else {
        UringFile::open(path)
    }
}

/// The uring runtime's environment: a [`UringEngine`] on the runtime's
/// thread (pagestream-uring's own driver); files are [`UringFile`]s (the
/// same type as [`TokioUringFile`]). `!Send`.
#[derive(Debug, Clone)]
pub struct UringEnv {
    engine: UringEngine,
}

impl UringEnv {
    pub(crate) fn new(engine: UringEngine) -> Self {
        UringEnv { engine }
    }

    /// The engine's own statistics.
    pub fn stats(&self) -> pagestream_uring::EngineStats {
        self.engine.stats()
    }
}

impl Env for UringEnv {
    type Engine = UringEngine;
    type File = UringFile;

    fn runtime(&self) -> Runtime {
        Runtime::Uring
    }

    fn engine(&self) -> UringEngine {
        self.engine.clone()
    }

    async fn open(&self, path: &Path, opts: FileOptions) -> io::Result<UringFile> {
        self.open_blocking(path, opts)
    }

    fn open_blocking(&self, path: &Path, opts: FileOptions) -> io::Result<UringFile> {
        open_uring_file(path, opts)
    }

    fn engine_counters(&self) -> EngineCounters {
        self.engine.stats().counters()
    }

    fn register_pool(&self, pool: &pagestream::BufferPool) -> io::Result<bool> {
        self.engine.register_pool(pool).map(|()| true)
    }
}

/// The uring-tokio runtime's environment: a [`UringTokioEngine`] whose
/// reaper runs on the run's multi-thread tokio runtime; files are
/// [`UringFile`]s, buffered or `O_DIRECT`. `Send + Sync`, like its engine
/// and files: a [`SpawnWorkload`](crate::SpawnWorkload) gets it in a task
/// on the runtime's workers.
#[derive(Debug, Clone)]
pub struct UringTokioEnv {
    engine: UringTokioEngine,
    handle: tokio::runtime::Handle,
}

impl UringTokioEnv {
    /// An engine reaped on `handle`'s runtime, with its inline
    /// `RWF_NOWAIT` attempt on or off. Fails with the engine's error naming
    /// the cause where io_uring is unavailable.
    pub(crate) fn new(handle: tokio::runtime::Handle, nowait: bool) -> io::Result<Self> {
        let engine = UringTokioEngine::builder()
            .handle(handle.clone())
            .nowait(nowait)
            .build()?;
        Ok(UringTokioEnv { engine, handle })
    }

    /// The engine's own statistics.
    pub fn stats(&self) -> pagestream_uring::EngineStats {
        self.engine.stats()
    }

    /// The tokio runtime the engine's reaper runs on (and, under
    /// [`Runtime::spawn`](crate::Runtime::spawn), the workload's task).
    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

impl Env for UringTokioEnv {
    type Engine = UringTokioEngine;
    type File = UringFile;

    fn runtime(&self) -> Runtime {
        Runtime::UringTokio
    }

    fn engine(&self) -> UringTokioEngine {
        self.engine.clone()
    }

    async fn open(&self, path: &Path, opts: FileOptions) -> io::Result<UringFile> {
        self.open_blocking(path, opts)
    }

    fn open_blocking(&self, path: &Path, opts: FileOptions) -> io::Result<UringFile> {
        open_uring_file(path, opts)
    }

    fn engine_counters(&self) -> EngineCounters {
        self.engine.stats().counters()
    }

    fn register_pool(&self, pool: &pagestream::BufferPool) -> io::Result<bool> {
        self.engine.register_pool(pool).map(|()| true)
    }
}

impl crate::SendEnv for UringTokioEnv {}

impl crate::SendEnv for ThreadPoolEnv {}

type OpenReply = mpsc::Sender<io::Result<OwnedDmaFile>>;

/// The glommio runtime's environment: a [`GlommioEngine`] on the executor's
/// thread; files are [`GlommioFile`]s (`O_DIRECT` only). `!Send`.
pub struct GlommioEnv {
    engine: GlommioEngine,
    /// The helper executor's queue for [`Env::open_blocking`], started on
    /// first use; dropping it ends the helper.
    opener: RefCell<Option<mpsc::Sender<(PathBuf, OpenReply)>>>,
}

impl fmt::Debug for GlommioEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlommioEnv")
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

fn buffered_unsupported(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "glommio reads with O_DIRECT only (DMA files): cannot open {} buffered; \
             ask for FileOptions::direct",
            path.display()
        ),
    )
}

impl GlommioEnv {
    pub(crate) fn new() -> Self {
        GlommioEnv {
            engine: GlommioEngine::new(),
            opener: RefCell::new(None),
        }
    }

    /// The engine's own statistics.
    pub fn stats(&self) -> pagestream_glommio::EngineStats {
        self.engine.stats()
    }

    /// A thread running a small glommio executor that opens DMA files and
    /// sends them back as `OwnedDmaFile`s, until the sender is dropped.
    fn start_opener() -> io::Result<mpsc::Sender<(PathBuf, OpenReply)>> {
        let (tx, rx) = mpsc::channel::<(PathBuf, OpenReply)>();
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<()>>();
        std::thread::Builder::new()
            .name("pagestream-glommio-opener".into())
            .spawn(move || {
                let ex = match LocalExecutorBuilder::new(Placement::Unbound)
                    .io_memory(GLOMMIO_MIN_IO_MEMORY)
                    .make()
                {
                    Ok(ex) => ex,
                    Err(e) => {
                        let _ = ready_tx.send(Err(io::Error::other(format!(
                            "cannot start glommio's file-opening executor: {e}"
                        ))));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                ex.run(async move {
                    // Blocking in recv is fine: this executor has nothing
                    // else to do between requests.
                    while let Ok((path, reply)) = rx.recv() {
                        let r = DmaFile::open(&path)
                            .await
                            .map(OwnedDmaFile::from)
                            .map_err(io::Error::from);
                        let _ = reply.send(r);
                    }
                });
            })?;
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("glommio's file-opening thread died"))??;
        Ok(tx)
    }
}

impl Env for GlommioEnv {
    type Engine = GlommioEngine;
    type File = GlommioFile;

    fn runtime(&self) -> Runtime {
        Runtime::Glommio
    }

    fn engine(&self) -> GlommioEngine {
        self.engine.clone()
    }

    async fn open(&self, path: &Path, opts: FileOptions) -> io::Result<GlommioFile> {
        if !opts.direct {
            return Err(buffered_unsupported(path));
        }
        GlommioFile::open(path, opts.block_size).await
    }

    fn open_blocking(&self, path: &Path, opts: FileOptions) -> io::Result<GlommioFile> {
        if !opts.direct {
            return Err(buffered_unsupported(path));
        }
        let mut opener = self.opener.borrow_mut();
        if opener.is_none() {
            *opener = Some(Self::start_opener()?);
        }
        let (reply, answer) = mpsc::channel();
        opener
            .as_ref()
            .expect("opener started")
            .send((path.to_path_buf(), reply))
            .map_err(|_| io::Error::other("glommio's file-opening thread died"))?;
        let owned = answer
            .recv()
            .map_err(|_| io::Error::other("glommio's file-opening thread died"))?
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot open {} as a glommio DMA file: {e}", path.display()),
                )
            })?;
        GlommioFile::from_dma(DmaFile::from(owned), opts.block_size)
    }

    fn engine_counters(&self) -> EngineCounters {
        self.engine.stats().counters()
    }
}

/// The object-store runtime's environment: an [`ObjectStoreEngine`] whose
/// GETs are tasks on the run's tokio runtime; files are [`ObjectFile`]s,
/// opened by URL ([`Env::open`] takes the URL as its path).
#[derive(Debug, Clone)]
pub struct ObjectStoreEnv {
    engine: ObjectStoreEngine,
    handle: tokio::runtime::Handle,
}

impl ObjectStoreEnv {
    pub(crate) fn new(engine: ObjectStoreEngine, handle: tokio::runtime::Handle) -> Self {
        ObjectStoreEnv { engine, handle }
    }

    /// The engine's own statistics.
    pub fn stats(&self) -> pagestream_object_store::ObjectStoreStats {
        self.engine.stats()
    }

    /// The tokio runtime the engine's GETs run on.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

/// `path` as the object URL it must be, or an error naming it; `direct`
/// refused (an object has no OS page cache to bypass).
fn object_url(path: &Path, opts: FileOptions) -> io::Result<&str> {
    let url = path.to_str().filter(|s| is_object_url(s)).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: not an object URL: the object-store runtime reads s3://bucket/key or \
                     http(s)://host/path, not local files",
                path.display()
            ),
        )
    })?;
    if opts.direct {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{url}: O_DIRECT does not apply to an object (it has no OS page cache to \
                 bypass); ask for FileOptions::buffered"
            ),
        ));
    }
    Ok(url)
}

impl Env for ObjectStoreEnv {
    type Engine = ObjectStoreEngine;
    type File = ObjectFile;

    fn runtime(&self) -> Runtime {
        Runtime::ObjectStore
    }

    fn engine(&self) -> ObjectStoreEngine {
        self.engine.clone()
    }

    /// Opens the object `path` names (`s3://bucket/key`, `http(s)://host/path`;
    /// see [`ObjectStoreEngine::open_url`]): a `HEAD` for its length and
    /// version.
    async fn open(&self, path: &Path, opts: FileOptions) -> io::Result<ObjectFile> {
        let url = object_url(path, opts)?;
        self.engine.open_url(url).await
    }

    fn open_blocking(&self, path: &Path, opts: FileOptions) -> io::Result<ObjectFile> {
        let url = object_url(path, opts)?;
        // The runtime's workers drive the HEAD while this thread waits.
        tokio::task::block_in_place(|| self.handle.block_on(self.engine.open_url(url)))
    }

    fn engine_counters(&self) -> EngineCounters {
        self.engine.counters()
    }
}
