//! The one place this crate names its synchronisation primitives and starts
//! its threads.
//!
//! Everything else imports from here, so `RUSTFLAGS="--cfg pagestream_loom"`
//! swaps in [loom](https://docs.rs/loom)'s model-checked versions (as core's
//! `sync` module does): the I/O threads' job queue (`threads.rs`) and the
//! cached-read queue with its helper thread (`cached.rs`) are then modelled,
//! see `engine/loom_tests.rs`. Under loom, time is not modelled either: the
//! helper's linger for a lone job never ends (see `cached.rs`).
//!
//! Methods that need the `Arc` they are called through take it as
//! `this: &Arc<Self>` (called as `Shared::submit(shared, job)`), not as
//! `self: &Arc<Self>`: stable Rust accepts only std's `Arc` as a receiver,
//! not loom's.
//!
//! The engine's counters ([`EngineStats`](crate::EngineStats)) and its AIO
//! error code stay std atomics: statistics and a report, which no thread
//! reads to decide anything. The atomics named here are the flags that
//! choose a read's path (`warm`, `nowait`, `aio_on`) and the AIO reaper's
//! count of reads in flight, which decides when it may exit.

#[cfg(not(pagestream_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize};
#[cfg(not(pagestream_loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(pagestream_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize};
#[cfg(pagestream_loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

// loom's locks report std's error types.
pub(crate) use std::sync::{PoisonError, TryLockError};

use std::io;

/// Starts a detached thread named `name` with a stack of `stack_size`
/// bytes running `f`: a std thread, or under loom a model thread (which
/// has neither name nor stack size; loom fails a model that ends with one
/// still blocked).
pub(crate) fn spawn(
    name: String,
    stack_size: usize,
    f: impl FnOnce() + Send + 'static,
) -> io::Result<()> {
    #[cfg(not(pagestream_loom))]
    {
        std::thread::Builder::new()
            .name(name)
            .stack_size(stack_size)
            .spawn(f)
            .map(drop)
    }
    #[cfg(pagestream_loom)]
    {
        let _ = (name, stack_size);
        loom::thread::spawn(f);
        Ok(())
    }
}
