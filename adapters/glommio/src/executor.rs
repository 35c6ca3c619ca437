//! Building a glommio executor whose `io_memory` fits `RLIMIT_MEMLOCK`.
//!
//! glommio registers its `io_memory` (default 10 MiB) with each of the three
//! io_uring rings of an executor, and the kernel charges each registration
//! against the user's `RLIMIT_MEMLOCK` (unless the process has
//! `CAP_IPC_LOCK`). With the common 8 MiB limit, glommio's default does not
//! fit: registration fails and glommio silently falls back to unregistered
//! buffers. Below 512 KiB glommio refuses to start at all, with an error
//! that does not say which setting to change. The helpers here size
//! `io_memory` to fit and turn both cases into errors that say what to do.

use crate::sys;
use glommio::{LocalExecutor, LocalExecutorBuilder, Placement};
use std::io;

/// `io_memory` asked for by default: 2 MiB, enough for two reads of
/// `io_combine_limit` 128 × 8 KiB in flight from registered memory (larger
/// or more reads fall back to ordinary allocations).
pub const DEFAULT_IO_MEMORY: usize = 2 << 20;

/// The smallest `RLIMIT_MEMLOCK` glommio 0.9 starts an executor with.
pub const GLOMMIO_MIN_MEMLOCK: u64 = 512 << 10;

/// The smallest `io_memory` glommio uses (it rounds smaller values up).
pub const GLOMMIO_MIN_IO_MEMORY: usize = 64 << 10;

/// Rings per executor that register `io_memory` (main, latency, poll).
const RINGS: u64 = 3;

/// Locked memory left to everything else (rings on old kernels, other
/// `mlock` users of the same user id).
const HEADROOM: u64 = 64 << 10;

/// The `io_memory` to give each of `executors` executors of this user so
/// that their registrations fit the soft `RLIMIT_MEMLOCK`: `requested`,
/// or less when the limit demands, rounded down to whole pages.
///
/// Fails, naming `RLIMIT_MEMLOCK` and `io_memory`, when the limit is below
/// [`GLOMMIO_MIN_MEMLOCK`] (glommio would refuse to start) or too low to give
/// each executor [`GLOMMIO_MIN_IO_MEMORY`].
pub fn fit_io_memory(requested: usize, executors: usize) -> io::Result<usize> {
    let executors = executors.max(1) as u64;
    let Some(limit) = sys::memlock_limit()? else {
        return Ok(requested.max(GLOMMIO_MIN_IO_MEMORY));
    };
    let fix = "raise it (`ulimit -l`, systemd LimitMEMLOCK=, docker --ulimit memlock=) \
               or run with CAP_IPC_LOCK";
    if limit < GLOMMIO_MIN_MEMLOCK {
        return Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "RLIMIT_MEMLOCK is {limit} bytes, below the {GLOMMIO_MIN_MEMLOCK} bytes glommio \
                 needs to start an executor (whose io_memory is registered with {RINGS} \
                 io_uring rings); {fix}"
            ),
        ));
    }
    let per_executor = limit.saturating_sub(HEADROOM) / (RINGS * executors);
    let fit = (per_executor.min(requested as u64) as usize) & !4095;
    if fit < GLOMMIO_MIN_IO_MEMORY {
        return Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "RLIMIT_MEMLOCK of {limit} bytes leaves {per_executor} bytes of io_memory per \
                 executor for {executors} executors x {RINGS} rings, below glommio's minimum \
                 of {GLOMMIO_MIN_IO_MEMORY}; {fix}"
            ),
        ));
    }
    Ok(fit)
}

/// A [`LocalExecutorBuilder`] at `placement` whose `io_memory` is
/// [`DEFAULT_IO_MEMORY`] or what fits `RLIMIT_MEMLOCK` (see
/// [`fit_io_memory`]; this executor is assumed to be the user's only one).
///
/// glommio 0.9 ignores `spin_before_park` on an executor without a CPU
/// binding (`Placement::Unbound`): to spin, bind it, for instance with
/// `Placement::Fenced(CpuSet::online()?)`, which still lets the thread move
/// between the online CPUs (widening an affinity the process started with).
/// The trade is measured in `docs/engines.md` (glommio).
pub fn executor_builder(placement: Placement) -> io::Result<LocalExecutorBuilder> {
    Ok(LocalExecutorBuilder::new(placement).io_memory(fit_io_memory(DEFAULT_IO_MEMORY, 1)?))
}

/// An unbound [`LocalExecutor`] for this thread, built with
/// [`executor_builder`]. Errors (memlock, io_uring unavailable) name the
/// limit and the `io_memory` tried instead of panicking.
pub fn make_executor() -> io::Result<LocalExecutor> {
    let io_memory = fit_io_memory(DEFAULT_IO_MEMORY, 1)?;
    LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(io_memory)
        .make()
        .map_err(|e| {
            let limit = match sys::memlock_limit() {
                Ok(Some(l)) => format!("{l} bytes"),
                Ok(None) => "unlimited".to_string(),
                Err(_) => "unknown".to_string(),
            };
            let e = io::Error::from(e);
            io::Error::new(
                e.kind(),
                format!(
                    "cannot start a glommio executor (io_memory {io_memory} bytes, \
                     RLIMIT_MEMLOCK {limit}): {e}"
                ),
            )
        })
}
