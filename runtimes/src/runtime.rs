//! [`Runtime`]: the runtimes by name, and starting one to run a workload.

use crate::env::{GlommioEnv, ThreadPoolEnv, TokioUringEnv, UringEnv};
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
}

impl Runtime {
    /// Every runtime, in the order reports list them.
    pub const ALL: [Runtime; 4] = [
        Runtime::ThreadPool,
        Runtime::TokioUring,
        Runtime::Glommio,
        Runtime::Uring,
    ];

    /// The runtime's name: `threadpool`, `tokio-uring`, `glommio` or `uring`.
    pub const fn name(self) -> &'static str {
        match self {
            Runtime::ThreadPool => "threadpool",
            Runtime::TokioUring => "tokio-uring",
            Runtime::Glommio => "glommio",
            Runtime::Uring => "uring",
        }
    }

    /// Whether the runtime's engine can read through the OS page cache
    /// (buffered files). glommio reads `O_DIRECT` only.
    pub const fn supports_buffered(self) -> bool {
        !matches!(self, Runtime::Glommio)
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
#[error("{given:?} is not a runtime: expected threadpool, tokio-uring, glommio or uring{}",
    if *.all_allowed { " (or all, or a comma-separated list)" } else { "" })]
pub struct ParseRuntimeError {
    /// What was given.
    pub given: String,
    /// Whether `all` and lists were accepted where it was given.
    pub all_allowed: bool,
}

impl FromStr for Runtime {
    type Err = ParseRuntimeError;

    /// Parses `threadpool`, `tokio-uring`, `glommio` or `uring` (exactly).
    fn from_str(s: &str) -> Result<Runtime, ParseRuntimeError> {
        Runtime::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| ParseRuntimeError {
                given: s.to_string(),
                all_allowed: false,
            })
    }
}

/// Parses `all` (every runtime, [`Runtime::ALL`]'s order) or a
/// comma-separated list of runtime names (in the order given, each once).
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
                    && msg.contains("uring"),
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
    }

    #[test]
    fn only_glommio_is_direct_only() {
        assert!(Runtime::ThreadPool.supports_buffered());
        assert!(Runtime::TokioUring.supports_buffered());
        assert!(Runtime::Uring.supports_buffered());
        assert!(!Runtime::Glommio.supports_buffered());
    }
}
