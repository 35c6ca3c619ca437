//! The one place core names its synchronisation primitives.
//!
//! Everything else imports from here, so `RUSTFLAGS="--cfg pagestream_loom"` swaps in
//! [loom](https://docs.rs/loom)'s model-checked versions without forking the
//! code (tokio's `loom` indirection). Only the frame-state protocol and the
//! waiter and watcher hand-offs are modelled; see `pool/loom_tests.rs`.

#[cfg(not(pagestream_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(pagestream_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(pagestream_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(pagestream_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

/// Lock a mutex, ignoring poisoning: every critical section in core leaves
/// its data consistent before anything that could panic, so a poisoned lock
/// still guards valid state.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
