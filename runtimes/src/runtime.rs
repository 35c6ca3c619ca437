//! [`Runtime`]: the runtimes by name, and starting one to run a workload.

use crate::env::{
    GlommioEnv, ObjectStoreEnv, ThreadPoolEnv, TokioUringEnv, UringEnv, UringTokioEnv,
};
use crate::{Options, SpawnWorkload, Workload};
use std::fmt;
use std::io;
use std::str::FromStr;
use std::time::Duration;

/// How long the glommio runtime waits, after its workload, for reads still
/// in flight (streams dropped mid-read) before it cancels them: a device
/// read takes milliseconds; only a stuck device takes longer.
const GLOMMIO_SETTLE: Duration = Duration::from_secs(10);

/// A runtime pagestream runs on, with its engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Runtime {
    /// `threadpool`: `futures::executor::block_on` on a fresh thread, with
    /// the thread-pool engine (blocking `preadv` on dedicated I/O threads).
    /// The engine works under any executor; `block_on` is the simplest.
    /// [`spawn`](Runtime::spawn) runs a workload in a task on a multi-thread
    /// tokio runtime instead, as a tokio program uses the engine.
    ThreadPool,
    /// `tokio-uring`: a tokio-uring runtime on a fresh thread, with the
    /// io_uring engine.
    TokioUring,
    /// `glommio`: a glommio `LocalExecutor` (sized to `RLIMIT_MEMLOCK`) on a
    /// fresh thread, with the glommio DMA engine (`O_DIRECT` only).
    Glommio,
    /// `uring`: pagestream-uring's own io_uring driver on a fresh thread
    /// (`UringRuntime::block_on`): reads submitted as they start, completions
    /// waited for in `io_uring_enter`.
    Uring,
    /// `uring-tokio`: a multi-thread tokio runtime
    /// ([`Options::workers`](crate::Options::workers) workers) with
    /// pagestream-uring's io_uring engine for tokio (`UringTokioEngine`):
    /// reads submitted as streams start them, completions taken by the
    /// stream or by a reaper task woken through tokio's reactor.
    ///
    /// [`run`](Runtime::run) polls the workload in the runtime's
    /// `block_on` on a fresh thread (the workload's future need not be
    /// `Send`), as the body of `#[tokio::main]` is polled: every completion
    /// the reaper takes on a worker then wakes that thread, a cross-thread
    /// wake-up per read the stream does not complete itself.
    /// [`spawn`](Runtime::spawn) runs a [`SpawnWorkload`] in a task on the
    /// runtime's workers instead, where a completion wakes its task on the
    /// same worker: the fast path.
    UringTokio,
    /// `object-store`: a multi-thread tokio runtime with
    /// [`OBJECT_STORE_WORKERS`] workers, with the object-store engine
    /// (range GETs through `object_store`). It reads objects named by URL
    /// (`s3://bucket/key`, `http(s)://host/path`), not local files: it is
    /// not in [`ALL`](Runtime::ALL), only in [`EVERY`](Runtime::EVERY).
    ObjectStore,
}

/// Worker threads of the [`Runtime::ObjectStore`] runtime's tokio runtime.
/// The workload's future runs on the thread that started the runtime (in
/// `block_on`); the GETs, their connections and the copies of their bodies
/// into frames run on the workers.
///
/// Measured on a 2-vCPU VM, `seqscan --file http://… --cache none --repeat
/// 7` over a 256 MiB object served by nginx on loopback (three rounds,
/// medians): 2 workers 1500–1631 MiB/s; a current-thread runtime (stream
/// and GETs on one thread) 1093–1216; 1 worker 1088–1332; 4 workers
/// 1266–1526 (`curl` of the whole object: 1067–1484).
pub const OBJECT_STORE_WORKERS: usize = 2;

/// The tokio runtime [`Runtime::ObjectStore`] runs on: multi-thread, with
/// [`OBJECT_STORE_WORKERS`] workers named `pagestream-object-store-io`, I/O
/// and timers enabled. For programs that drive an
/// `ObjectStoreEngine` themselves (give the engine its
/// [`handle`](tokio::runtime::Runtime::handle)) and want the same runtime.
pub fn object_store_tokio() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(OBJECT_STORE_WORKERS)
        .thread_name("pagestream-object-store-io")
        .enable_all()
        .build()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot build a tokio runtime: {e}")))
}

impl Runtime {
    /// Every runtime that reads local files, in the order reports list
    /// them: what `all` means on a command line ([`parse_list`]).
    /// [`Runtime::ObjectStore`], which reads URLs, is not among them.
    pub const ALL: [Runtime; 5] = [
        Runtime::ThreadPool,
        Runtime::TokioUring,
        Runtime::Glommio,
        Runtime::Uring,
        Runtime::UringTokio,
    ];

    /// Every runtime: [`ALL`](Runtime::ALL), then [`Runtime::ObjectStore`].
    pub const EVERY: [Runtime; 6] = [
        Runtime::ThreadPool,
        Runtime::TokioUring,
        Runtime::Glommio,
        Runtime::Uring,
        Runtime::UringTokio,
        Runtime::ObjectStore,
    ];

    /// The runtime's name: `threadpool`, `tokio-uring`, `glommio`, `uring`,
    /// `uring-tokio` or `object-store`.
    pub const fn name(self) -> &'static str {
        match self {
            Runtime::ThreadPool => "threadpool",
            Runtime::TokioUring => "tokio-uring",
            Runtime::Glommio => "glommio",
            Runtime::Uring => "uring",
            Runtime::UringTokio => "uring-tokio",
            Runtime::ObjectStore => "object-store",
        }
    }

    /// Whether [`spawn`](Self::spawn) runs on this runtime: its engine and
    /// files are `Send + Sync` and it has (or is given) a multi-thread
    /// tokio runtime to spawn on. `uring-tokio`, and `threadpool` (the
    /// thread-pool engine under a multi-thread tokio runtime).
    pub const fn spawns(self) -> bool {
        matches!(self, Runtime::UringTokio | Runtime::ThreadPool)
    }

    /// Whether the runtime opens files buffered
    /// ([`FileOptions::buffered`](crate::FileOptions::buffered)). glommio
    /// reads `O_DIRECT` only. The object-store runtime opens its objects
    /// buffered only (there is no OS page cache to bypass, or to read
    /// through: see [`reads_urls`](Self::reads_urls)).
    pub const fn supports_buffered(self) -> bool {
        !matches!(self, Runtime::Glommio)
    }

    /// Whether the runtime opens files with `O_DIRECT`
    /// ([`FileOptions::direct`](crate::FileOptions::direct)): all but
    /// object-store.
    pub const fn supports_direct(self) -> bool {
        !matches!(self, Runtime::ObjectStore)
    }

    /// Whether the runtime reads objects named by URL (`s3://bucket/key`,
    /// `http(s)://host/path`) rather than local files: object-store only.
    /// Its [`Env::open`](crate::Env::open) takes the URL as the path, and
    /// refuses a local path with an error naming it.
    pub const fn reads_urls(self) -> bool {
        matches!(self, Runtime::ObjectStore)
    }

    /// The runtime that reads `path`: [`Runtime::ObjectStore`] for an object
    /// URL ([`is_object_url`](crate::is_object_url)), else `None` (a local
    /// file, which every runtime in [`ALL`](Runtime::ALL) reads).
    pub fn for_url(path: &str) -> Option<Runtime> {
        crate::is_object_url(path).then_some(Runtime::ObjectStore)
    }

    /// Runs `workload` on this runtime with default [`Options`]; see
    /// [`run_with`](Self::run_with).
    pub fn run<W: Workload>(self, workload: W) -> Result<W::Output, RuntimeError> {
        self.run_with(&Options::default(), workload)
    }

    /// Starts this runtime on a fresh thread, with a fresh engine configured
    /// by `options`, runs `workload` there to completion and returns its
    /// output. Fails with a [`RuntimeError`] naming the runtime and the cause
    /// when the runtime cannot start (io_uring unavailable, `RLIMIT_MEMLOCK`
    /// too low for glommio, no thread). A panic in the workload is resumed
    /// on the calling thread.
    pub fn run_with<W: Workload>(
        self,
        options: &Options,
        workload: W,
    ) -> Result<W::Output, RuntimeError> {
        self.on_thread(move || -> io::Result<W::Output> {
            match self {
                Runtime::ThreadPool => {
                    let env = ThreadPoolEnv::new(options);
                    Ok(futures::executor::block_on(workload.run(env)))
                }
                Runtime::TokioUring => {
                    let env = TokioUringEnv::new()?;
                    pagestream_tokio_uring::try_start(workload.run(env))
                }
                Runtime::Glommio => {
                    let ex = pagestream_glommio::make_executor()?;
                    let out = ex.run(async move {
                        let out = workload.run(GlommioEnv::new()).await;
                        // Streams dropped with reads in flight: glommio
                        // would leak those tasks, and the files they hold
                        // open, when the executor ends.
                        pagestream_glommio::settle_reads(GLOMMIO_SETTLE).await;
                        out
                    });
                    // Reads the settling gave up on must not leave frames
                    // "being read".
                    pagestream_glommio::cancel_reads_in_flight();
                    Ok(out)
                }
                Runtime::Uring => {
                    let rt = pagestream_uring::UringRuntime::builder()
                        .nowait(options.nowait)
                        .build()?;
                    let env = UringEnv::new(rt.engine());
                    Ok(rt.block_on(workload.run(env)))
                }
                Runtime::UringTokio => {
                    let rt = worker_tokio(self, options.workers)?;
                    let env = UringTokioEnv::new(rt.handle().clone(), options.nowait)?;
                    // Polled here, on this thread, as the body of
                    // `#[tokio::main]` is: each completion the
                    // reaper takes wakes this thread from a worker.
                    let out = rt.block_on(workload.run(env));
                    drop(rt);
                    Ok(out)
                }
                Runtime::ObjectStore => {
                    let rt = object_store_tokio()?;
                    let engine = pagestream_object_store::ObjectStoreEngine::builder()
                        .handle(rt.handle().clone())
                        .build()?;
                    let env = ObjectStoreEnv::new(engine, rt.handle().clone());
                    let out = rt.block_on(workload.run(env));
                    // GETs no stream waits for any more are dropped
                    // with the runtime (their frames go back empty).
                    drop(rt);
                    Ok(out)
                }
            }
        })
    }

    /// Runs `f` on a fresh thread named `pagestream-<name>` and returns what
    /// it returns: an error as a [`RuntimeError`] naming this runtime, a
    /// panic resumed on the calling thread.
    fn on_thread<T: Send>(
        self,
        f: impl FnOnce() -> io::Result<T> + Send,
    ) -> Result<T, RuntimeError> {
        let err = |source: io::Error| RuntimeError {
            runtime: self,
            source,
        };
        std::thread::scope(|s| {
            let thread = std::thread::Builder::new()
                .name(format!("pagestream-{}", self.name()))
                .spawn_scoped(s, f)
                .map_err(|e| {
                    err(io::Error::new(
                        e.kind(),
                        format!("cannot spawn its thread: {e}"),
                    ))
                })?;
            match thread.join() {
                Ok(r) => r.map_err(err),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs `workload` in a task spawned on this runtime, with default
    /// [`Options`]; see [`spawn_with`](Self::spawn_with).
    pub fn spawn<W: SpawnWorkload>(self, workload: W) -> Result<W::Output, RuntimeError> {
        self.spawn_with(&Options::default(), workload)
    }

    /// Starts this runtime with a fresh engine configured by `options` on a
    /// multi-thread tokio runtime of [`Options::workers`] workers (threads
    /// named `pagestream-<name>-worker`), spawns `workload`'s future there
    /// and waits for it on a fresh thread: the workload runs as the task a
    /// `#[tokio::main]` program spawns for its scan, polled on the workers.
    /// On `uring-tokio` a completion the reaper takes then wakes its task on
    /// the same worker (tokio's LIFO slot), with no thread in between; on
    /// `threadpool` the engine's I/O threads wake the task.
    ///
    /// Only the runtimes that [`spawns`](Self::spawns) say so do; the
    /// others fail with a [`RuntimeError`] of kind
    /// [`io::ErrorKind::Unsupported`] saying why (their engines' futures are
    /// not `Send`, or they need a thread of their own): use
    /// [`run_with`](Self::run_with) there. A panic in the workload's task is
    /// resumed on the calling thread.
    pub fn spawn_with<W: SpawnWorkload>(
        self,
        options: &Options,
        workload: W,
    ) -> Result<W::Output, RuntimeError> {
        let err = |source: io::Error| RuntimeError {
            runtime: self,
            source,
        };
        if !self.spawns() {
            let why = match self {
                Runtime::Glommio => "glommio's engine and futures belong to its executor's thread",
                Runtime::ObjectStore => {
                    "the object-store runtime polls its workload in block_on (run_with)"
                }
                _ => "its io_uring is driven by the thread that polls the stream",
            };
            return Err(err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "cannot spawn a workload on a multi-thread tokio runtime: {why}; use \
                     Runtime::run_with (uring-tokio and threadpool spawn)"
                ),
            )));
        }
        self.on_thread(move || -> io::Result<W::Output> {
            let rt = worker_tokio(self, options.workers)?;
            let task = match self {
                Runtime::UringTokio => {
                    let env = UringTokioEnv::new(rt.handle().clone(), options.nowait)?;
                    rt.spawn(workload.run(env))
                }
                Runtime::ThreadPool => rt.spawn(workload.run(ThreadPoolEnv::new(options))),
                _ => unreachable!("checked by spawns()"),
            };
            let out = rt.block_on(task);
            drop(rt);
            match out {
                Ok(v) => Ok(v),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => Err(io::Error::other(format!(
                    "the workload's task did not finish: {e}"
                ))),
            }
        })
    }
}

/// Default worker threads of the multi-thread tokio runtime that
/// [`Runtime::UringTokio`] and [`Runtime::spawn_with`] start
/// ([`Options::workers`]): the reference machine's two cores. Measured
/// there (`pagestream-bench scan --engine uring-tokio --workers N`, random
/// 8 KiB O_DIRECT reads): see `docs/engines.md`, "io_uring from tokio".
pub const TOKIO_WORKERS: usize = 2;

/// The multi-thread tokio runtime of `uring-tokio` and of
/// [`Runtime::spawn_with`]: `workers` workers (at least one) named
/// `pagestream-<rt>-worker`, I/O (the reaper's reactor) and timers enabled.
fn worker_tokio(rt: Runtime, workers: usize) -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .thread_name(format!("pagestream-{rt}-worker"))
        .enable_all()
        .build()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot build a tokio runtime: {e}")))
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A runtime that could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the {runtime} runtime: {source}")]
pub struct RuntimeError {
    /// The runtime.
    pub runtime: Runtime,
    /// Why (its message names the setting to change where one is known).
    #[source]
    pub source: io::Error,
}

impl From<RuntimeError> for io::Error {
    fn from(e: RuntimeError) -> io::Error {
        io::Error::new(e.source.kind(), e.to_string())
    }
}

/// A runtime name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a runtime: expected threadpool, tokio-uring, glommio, uring, uring-tokio or object-store{}",
    if *.all_allowed { " (or all, or a comma-separated list)" } else { "" })]
pub struct ParseRuntimeError {
    /// What was given.
    pub given: String,
    /// Whether `all` and lists were accepted where it was given.
    pub all_allowed: bool,
}

impl FromStr for Runtime {
    type Err = ParseRuntimeError;

    /// Parses `threadpool`, `tokio-uring`, `glommio`, `uring`,
    /// `uring-tokio` or `object-store` (exactly).
    fn from_str(s: &str) -> Result<Runtime, ParseRuntimeError> {
        Runtime::EVERY
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| ParseRuntimeError {
                given: s.to_string(),
                all_allowed: false,
            })
    }
}

/// Parses `all` (every runtime that reads local files, [`Runtime::ALL`]'s
/// order) or a comma-separated list of runtime names (in the order given,
/// each once; `object-store` may be one of them).
pub fn parse_list(s: &str) -> Result<Vec<Runtime>, ParseRuntimeError> {
    let bad = |given: &str| ParseRuntimeError {
        given: given.to_string(),
        all_allowed: true,
    };
    if s == "all" {
        return Ok(Runtime::ALL.to_vec());
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let rt: Runtime = part.parse().map_err(|_| bad(part))?;
        if !out.contains(&rt) {
            out.push(rt);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for rt in Runtime::ALL {
            assert_eq!(rt.name().parse::<Runtime>(), Ok(rt));
            assert_eq!(rt.to_string(), rt.name());
        }
        let names: Vec<&str> = Runtime::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "threadpool",
                "tokio-uring",
                "glommio",
                "uring",
                "uring-tokio"
            ]
        );
        assert_eq!(Runtime::EVERY[..5], Runtime::ALL);
        assert_eq!(Runtime::EVERY[5], Runtime::ObjectStore);
        assert_eq!("uring-tokio".parse::<Runtime>(), Ok(Runtime::UringTokio));
        assert_eq!("object-store".parse::<Runtime>(), Ok(Runtime::ObjectStore));
        assert_eq!(Runtime::ObjectStore.to_string(), "object-store");
    }

    #[test]
    fn bad_names_are_errors_naming_the_choices() {
        for bad in ["", "tokio", "Glommio", "tokio_uring", "all", " threadpool"] {
            let e = bad.parse::<Runtime>().unwrap_err();
            assert_eq!(e.given, bad);
            let msg = e.to_string();
            assert!(
                msg.contains("threadpool")
                    && msg.contains("tokio-uring")
                    && msg.contains("glommio")
                    && msg.contains("uring")
                    && msg.contains("uring-tokio")
                    && msg.contains("object-store"),
                "{msg}"
            );
            assert!(!msg.contains("or all"), "{msg}");
        }
    }

    #[test]
    fn lists() {
        assert_eq!(parse_list("all").unwrap(), Runtime::ALL);
        assert_eq!(parse_list("glommio").unwrap(), [Runtime::Glommio]);
        assert_eq!(
            parse_list("glommio,threadpool,glommio").unwrap(),
            [Runtime::Glommio, Runtime::ThreadPool]
        );
        assert_eq!(
            parse_list("uring,tokio-uring").unwrap(),
            [Runtime::Uring, Runtime::TokioUring]
        );
        assert_eq!(
            parse_list("uring-tokio,uring").unwrap(),
            [Runtime::UringTokio, Runtime::Uring]
        );
        assert!(parse_list("all").unwrap().contains(&Runtime::UringTokio));
        let e = parse_list("threadpool,io_uring").unwrap_err();
        assert_eq!(e.given, "io_uring");
        assert!(e.to_string().contains("or all"), "{e}");
        assert!(parse_list("").is_err());
        assert!(parse_list("threadpool,").is_err());
        assert!(parse_list("all,glommio").is_err());
        // `all` is the runtimes that read local files.
        assert!(!parse_list("all").unwrap().contains(&Runtime::ObjectStore));
        assert_eq!(
            parse_list("object-store,threadpool").unwrap(),
            [Runtime::ObjectStore, Runtime::ThreadPool]
        );
    }

    #[test]
    fn only_object_store_reads_urls() {
        for rt in Runtime::ALL {
            assert!(!rt.reads_urls() && rt.supports_direct(), "{rt}");
        }
        let o = Runtime::ObjectStore;
        assert!(o.reads_urls() && o.supports_buffered() && !o.supports_direct());
        assert_eq!(Runtime::for_url("s3://bucket/base/5/16384"), Some(o));
        assert_eq!(Runtime::for_url("https://host/t.dat"), Some(o));
        assert_eq!(Runtime::for_url("/var/lib/pg/base/5/16384"), None);
        assert_eq!(Runtime::for_url("s3.dat"), None);
    }

    #[test]
    fn only_glommio_is_direct_only() {
        assert!(Runtime::ThreadPool.supports_buffered());
        assert!(Runtime::TokioUring.supports_buffered());
        assert!(Runtime::Uring.supports_buffered());
        assert!(Runtime::UringTokio.supports_buffered());
        assert!(!Runtime::Glommio.supports_buffered());
    }

    #[test]
    fn only_uring_tokio_and_threadpool_spawn() {
        let spawning: Vec<Runtime> = Runtime::EVERY.into_iter().filter(|r| r.spawns()).collect();
        assert_eq!(spawning, [Runtime::ThreadPool, Runtime::UringTokio]);
    }
}
