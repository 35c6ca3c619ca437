//! [`Runtime`]: the runtimes by name, and starting one to run a workload.

use crate::env::{GlommioEnv, ObjectStoreEnv, ThreadPoolEnv, TokioUringEnv, UringEnv};
use crate::{Options, Workload};
use std::fmt;
use std::io;
use std::str::FromStr;

/// A runtime pagestream runs on, with its engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Runtime {
    /// `threadpool`: `futures::executor::block_on` on a fresh thread, with
    /// the thread-pool engine (blocking `preadv` on dedicated I/O threads).
    /// The engine works under any executor; `block_on` is the simplest.
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
    pub const ALL: [Runtime; 4] = [
        Runtime::ThreadPool,
        Runtime::TokioUring,
        Runtime::Glommio,
        Runtime::Uring,
    ];

    /// Every runtime: [`ALL`](Runtime::ALL), then [`Runtime::ObjectStore`].
    pub const EVERY: [Runtime; 5] = [
        Runtime::ThreadPool,
        Runtime::TokioUring,
        Runtime::Glommio,
        Runtime::Uring,
        Runtime::ObjectStore,
    ];

    /// The runtime's name: `threadpool`, `tokio-uring`, `glommio`, `uring`
    /// or `object-store`.
    pub const fn name(self) -> &'static str {
        match self {
            Runtime::ThreadPool => "threadpool",
            Runtime::TokioUring => "tokio-uring",
            Runtime::Glommio => "glommio",
            Runtime::Uring => "uring",
            Runtime::ObjectStore => "object-store",
        }
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
        let err = |source: io::Error| RuntimeError {
            runtime: self,
            source,
        };
        std::thread::scope(|s| {
            let thread = std::thread::Builder::new()
                .name(format!("pagestream-{}", self.name()))
                .spawn_scoped(s, move || -> io::Result<W::Output> {
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
                            let out = ex.run(async move { workload.run(GlommioEnv::new()).await });
                            // Reads leaked by glommio (tasks still waiting for
                            // I/O) must not leave frames "being read".
                            pagestream_glommio::cancel_reads_in_flight();
                            Ok(out)
                        }
                        Runtime::Uring => {
                            let rt = pagestream_uring::UringRuntime::new()?;
                            let env = UringEnv::new(rt.engine());
                            Ok(rt.block_on(workload.run(env)))
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
#[error("{given:?} is not a runtime: expected threadpool, tokio-uring, glommio, uring or object-store{}",
    if *.all_allowed { " (or all, or a comma-separated list)" } else { "" })]
pub struct ParseRuntimeError {
    /// What was given.
    pub given: String,
    /// Whether `all` and lists were accepted where it was given.
    pub all_allowed: bool,
}

impl FromStr for Runtime {
    type Err = ParseRuntimeError;

    /// Parses `threadpool`, `tokio-uring`, `glommio`, `uring` or
    /// `object-store` (exactly).
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
        assert_eq!(names, ["threadpool", "tokio-uring", "glommio", "uring"]);
        assert_eq!(Runtime::EVERY[..4], Runtime::ALL);
        assert_eq!(Runtime::EVERY[4], Runtime::ObjectStore);
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
        assert!(!Runtime::Glommio.supports_buffered());
    }
}
