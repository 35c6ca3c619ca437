//! Shared by the engine's integration tests: the conformance harness over
//! any backend (a store, moto, nginx), the servers, stamped objects,
//! verified scans and watchdogs.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};
use pagestream::testing::conformance::Harness;
use pagestream::testing::{require, stamp};
use pagestream::{BlockSource, BufferPool, IoEngine, ReadStream};
use pagestream_object_store::testing::{Moto, Nginx};
use pagestream_object_store::{ObjectFile, ObjectStoreEngine};
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long any one scan or wait in these tests may take before it counts
/// as a hang.
pub const WATCHDOG: Duration = Duration::from_secs(60);

/// Block size of the tests' objects.
pub const BS: usize = 8192;

/// A multi-thread tokio runtime with two workers (the engine's reads are
/// tasks on it; the harness blocks in place on it).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// `fut`'s output, or a panic naming `what` if it takes longer than
/// [`WATCHDOG`]: a hang becomes a failure.
pub async fn watchdog<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WATCHDOG, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no result within {WATCHDOG:?} (a hang)"),
    }
}

/// Waits (under the [`WATCHDOG`]) until `cond` holds, polling every 10 ms.
pub async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    watchdog(what, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// `nblocks` blocks of [`BS`] bytes stamped with `seed`, then `tail` bytes
/// of the next block's stamp.
pub fn stamped_bytes(seed: u64, nblocks: u64, tail: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; (nblocks as usize + 1) * BS];
    for (b, page) in bytes.chunks_mut(BS).enumerate() {
        stamp::fill(seed, b as u64, page);
    }
    bytes.truncate(nblocks as usize * BS + tail);
    bytes
}

/// A fresh directory under the system's temporary directory, removed with
/// everything in it on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "pagestream-os-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// nginx serving a fresh directory, or `None` (the test is skipped; under
/// `CI=true` it fails) if nginx is not installed.
pub fn nginx() -> Option<(Nginx, TempDir)> {
    let dir = TempDir::new("nginx-root");
    let n = require("nginx", Nginx::start(dir.path()))?;
    Some((n, dir))
}

/// moto with `bucket` created, or `None` as [`nginx`].
pub fn moto(bucket: &str) -> Option<Moto> {
    let m = require("moto", Moto::start())?;
    m.create_bucket(bucket).expect("create bucket");
    Some(m)
}

/// Where the harness keeps its objects.
pub enum Backend {
    /// Objects put into `store` and opened with
    /// [`ObjectStoreEngine::open`], named `{url}{key}` (`url` like
    /// `memory:///`).
    Store {
        store: Arc<dyn ObjectStore>,
        url: String,
    },
    /// A bucket on an S3 server (moto), through object_store's S3 client.
    S3 {
        /// The server's `AWS_*` settings ([`Moto::env`]).
        env: Vec<(&'static str, String)>,
        bucket: String,
        /// The store objects are put and opened through, unless each gets
        /// its own.
        shared: AmazonS3,
    },
    /// Files written under nginx's root and opened by their URL.
    Nginx { nginx: Nginx, root: TempDir },
}

impl Backend {
    /// `bucket` on moto (which must outlive the backend).
    pub fn moto(moto: &Moto, bucket: &str) -> Backend {
        let env = moto.env();
        Backend::S3 {
            shared: s3_store(&env, bucket),
            env,
            bucket: bucket.into(),
        }
    }

    /// Stores `bytes` as object `key` and opens it; with `own_store`, through
    /// a store (a connection pool) of its own (see [`open`](Self::open)).
    pub async fn put(
        &self,
        engine: &ObjectStoreEngine,
        key: &str,
        bytes: Vec<u8>,
        own_store: bool,
    ) -> io::Result<ObjectFile> {
        self.write(key, bytes).await?;
        self.open(engine, key, own_store).await
    }

    /// Stores (or replaces) object `key`.
    pub async fn write(&self, key: &str, bytes: Vec<u8>) -> io::Result<()> {
        let location = ObjectPath::from(key);
        let store: Arc<dyn ObjectStore> = match self {
            Backend::Store { store, .. } => Arc::clone(store),
            // A store for this put alone (see `open`).
            Backend::S3 { env, bucket, .. } => Arc::new(s3_store(env, bucket)),
            Backend::Nginx { root, .. } => {
                let path = root.path().join(key);
                if let Some(d) = path.parent() {
                    std::fs::create_dir_all(d)?;
                }
                // Written aside and renamed, as a replaced object appears
                // to a reader: all at once.
                let tmp = root.path().join(format!(".{}.tmp", key.replace('/', "_")));
                std::fs::write(&tmp, bytes)?;
                return std::fs::rename(&tmp, &path);
            }
        };
        store
            .put(&location, PutPayload::from(bytes))
            .await
            .map(drop)
            .map_err(io::Error::other)
    }

    /// Opens object `key`: through the backend's one store (nginx: by URL,
    /// [`ObjectStoreEngine::open_url`]), or with `own_store` through a
    /// store of its own. A harness that opens objects on another runtime
    /// than the engine's reads run on needs its own store for each: a
    /// pooled connection is driven by the runtime that made it, and a
    /// blocked runtime's connections answer no one.
    pub async fn open(
        &self,
        engine: &ObjectStoreEngine,
        key: &str,
        own_store: bool,
    ) -> io::Result<ObjectFile> {
        let location = ObjectPath::from(key);
        let name = self.name(key);
        match self {
            Backend::Store { store, .. } => engine.open(Arc::clone(store), location, name).await,
            Backend::S3 {
                env,
                bucket,
                shared,
            } => {
                let store: Arc<dyn ObjectStore> = if own_store {
                    Arc::new(s3_store(env, bucket))
                } else {
                    Arc::new(shared.clone())
                };
                engine.open(store, location, name).await
            }
            Backend::Nginx { nginx, .. } if own_store => {
                let store = HttpBuilder::new()
                    .with_url(nginx.url(""))
                    .with_client_options(ClientOptions::new().with_allow_http(true))
                    .build()
                    .map_err(io::Error::other)?;
                engine.open(Arc::new(store), location, name).await
            }
            Backend::Nginx { nginx, .. } => engine.open_url(&nginx.url(key)).await,
        }
    }

    /// What messages call object `key`.
    pub fn name(&self, key: &str) -> String {
        match self {
            Backend::Store { url, .. } => format!("{url}{key}"),
            Backend::S3 { bucket, .. } => format!("s3://{bucket}/{key}"),
            Backend::Nginx { nginx, .. } => nginx.url(key),
        }
    }
}

/// An S3 store for `bucket` with the settings `env` names.
pub fn s3_store(env: &[(&'static str, String)], bucket: &str) -> AmazonS3 {
    let get = |k: &str| {
        env.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    AmazonS3Builder::new()
        .with_endpoint(get("AWS_ENDPOINT"))
        .with_access_key_id(get("AWS_ACCESS_KEY_ID"))
        .with_secret_access_key(get("AWS_SECRET_ACCESS_KEY"))
        .with_region(get("AWS_REGION"))
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .build()
        .expect("S3 store")
}

/// The conformance harness: stamped objects in a [`Backend`], read by one
/// engine.
///
/// Objects are put and opened on a runtime of the harness's own, on a
/// thread of their own (the harness's methods are synchronous, and are
/// called inside the runtime the suite runs on, which may be a
/// current-thread one).
pub struct Objects {
    engine: ObjectStoreEngine,
    backend: Backend,
    setup: tokio::runtime::Runtime,
    next: AtomicU64,
    name: String,
    reads_stay_pending: bool,
}

impl Objects {
    /// A harness over `backend`; `name` words the suite's messages.
    /// `reads_stay_pending`: whether the engine's runtime runs its reads
    /// only when the stream's task yields (a current-thread runtime), so a
    /// read never finishes inside the poll that started it; each object is
    /// then opened through a store of its own (see [`Backend::open`]), as
    /// that runtime is blocked while the harness puts an object.
    pub fn new(
        engine: ObjectStoreEngine,
        backend: Backend,
        name: &str,
        reads_stay_pending: bool,
    ) -> Objects {
        Objects {
            engine,
            backend,
            setup: runtime(),
            next: AtomicU64::new(0),
            name: name.into(),
            reads_stay_pending,
        }
    }

    /// Stores `bytes` as a new object and opens it.
    fn put(&self, bytes: Vec<u8>) -> ObjectFile {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let key = format!("objects/{n}");
        std::thread::scope(|s| {
            s.spawn(|| {
                self.setup.block_on(async {
                    self.backend
                        .put(&self.engine, &key, bytes, self.reads_stay_pending)
                        .await
                        .unwrap_or_else(|e| panic!("{}: put {key}: {e}", self.name))
                })
            })
            .join()
            .expect("put")
        })
    }
}

/// Which runtime [`conformance`] runs the suite and the engine's reads on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// One thread: reads run only when the stream's task yields, so the
    /// suite also checks that reads are in flight where it expects them.
    CurrentThread,
    /// Two workers beside the thread polling the streams: reads complete
    /// concurrently with the polls.
    MultiThread,
}

/// Runs the conformance suite over `backend` on a runtime of `flavor`;
/// returns the engine's counters.
pub fn conformance(
    name: &str,
    backend: Backend,
    flavor: Flavor,
) -> pagestream_object_store::ObjectStoreStats {
    let rt = match flavor {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime"),
        Flavor::MultiThread => runtime(),
    };
    let engine = rt.block_on(async { ObjectStoreEngine::new().expect("engine") });
    let h = Objects::new(
        engine.clone(),
        backend,
        &format!("{name}, {flavor:?}"),
        flavor == Flavor::CurrentThread,
    );
    rt.block_on(pagestream::testing::conformance::run_all(&h));
    engine.stats()
}

impl Harness for Objects {
    type Engine = ObjectStoreEngine;

    fn engine(&self) -> ObjectStoreEngine {
        self.engine.clone()
    }

    fn stamped_file(&self, nblocks: u64, block_size: usize) -> (ObjectFile, u64) {
        assert_eq!(block_size, BS, "the harness stamps {BS}-byte blocks");
        let seed = 0x5eed_0000 + self.next.load(Ordering::Relaxed);
        (self.put(stamped_bytes(seed, nblocks, 0)), seed)
    }

    fn stamped_file_with_tail(
        &self,
        nblocks: u64,
        block_size: usize,
        tail: usize,
    ) -> (ObjectFile, u64) {
        assert_eq!(block_size, BS, "the harness stamps {BS}-byte blocks");
        let seed = 0x7a11_0000 + self.next.load(Ordering::Relaxed);
        (self.put(stamped_bytes(seed, nblocks, tail)), seed)
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn reads_stay_pending(&self) -> bool {
        self.reads_stay_pending
    }

    fn aborts_abandoned_reads(&self) -> bool {
        true
    }
}

/// What a scan saw: the blocks handed out right, in order, and the errors
/// in their place.
#[derive(Debug, Default)]
pub struct Scan {
    /// Blocks whose pages were handed out (each checked against its stamp).
    pub pages: Vec<u64>,
    /// Errors, with the index of the item they took the place of.
    pub errors: Vec<(usize, io::Error)>,
}

/// Drains `stream`, under the [`WATCHDOG`]: every page must be the block
/// `expect` names at its place, holding its stamp under `seed` (a wrong
/// page panics); errors are collected. Panics if the stream hands out more
/// or fewer items than `expect`.
pub async fn drain<E: IoEngine, S: BlockSource>(
    stream: &mut ReadStream<E, S>,
    seed: u64,
    expect: &[u64],
    what: &str,
) -> Scan {
    watchdog(what, async {
        let mut scan = Scan::default();
        let mut i = 0;
        while let Some(item) = stream.next().await {
            assert!(i < expect.len(), "{what}: more items than asked for");
            match item {
                Ok(page) => {
                    assert_eq!(page.block(), expect[i], "{what}: item {i}: wrong block");
                    assert!(
                        stamp::check(seed, expect[i], &page),
                        "{what}: block {} has wrong contents (stamp of block {:?})",
                        expect[i],
                        stamp::block_of(&page)
                    );
                    scan.pages.push(expect[i]);
                }
                Err(e) => scan.errors.push((i, e)),
            }
            i += 1;
        }
        assert_eq!(i, expect.len(), "{what}: the stream ended early");
        scan
    })
    .await
}

/// Puts an object of `nblocks` stamped blocks (`seed`) as `t` in `store`
/// and opens it on `engine`, as `memory:///t`.
pub async fn put_stamped<S: ObjectStore>(
    engine: &ObjectStoreEngine,
    store: &Arc<S>,
    seed: u64,
    nblocks: u64,
) -> ObjectFile {
    let path = ObjectPath::from("t");
    store
        .put(&path, PutPayload::from(stamped_bytes(seed, nblocks, 0)))
        .await
        .expect("put");
    let dyn_store: Arc<dyn ObjectStore> = Arc::clone(store) as _;
    engine
        .open(dyn_store, path, "memory:///t")
        .await
        .expect("open")
}

/// A pool of `frames` frames of [`BS`] bytes.
pub fn pool(frames: usize) -> BufferPool {
    BufferPool::new(frames, BS).expect("pool")
}
