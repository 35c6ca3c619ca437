//! The one place core names its synchronisation primitives.
//!
//! Everything else imports from here, so `RUSTFLAGS="--cfg pagestream_loom"` swaps in
//! [loom](https://docs.rs/loom)'s model-checked versions without forking the
//! code (tokio's `loom` indirection). What is modelled: the frame-state
//! protocol and the frame waiters' and read watchers' hand-offs
//! (`pool/loom_tests.rs`), and a whole [`ReadStream`](crate::ReadStream)
//! over an engine that completes reads on other threads: the completion
//! mailbox, its waker and `close` (`loom_stream_tests.rs`). The thread-pool
//! engine's own `sync` module does the same for its read queues.

#[cfg(not(pagestream_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(not(pagestream_loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(pagestream_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
#[cfg(pagestream_loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

use std::task::Waker;

/// Lock a mutex, ignoring poisoning: every critical section in core leaves
/// its data consistent before anything that could panic, so a poisoned lock
/// still guards valid state.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One task's waker, registered by the task and taken by whoever wakes it:
/// `futures`' `AtomicWaker` (lock-free), or loom's under `pagestream_loom`,
/// whose register and take are scheduling points of the model.
#[derive(Debug, Default)]
pub(crate) struct AtomicWaker {
    #[cfg(not(pagestream_loom))]
    inner: futures::task::AtomicWaker,
    #[cfg(pagestream_loom)]
    inner: loom::future::AtomicWaker,
}

impl AtomicWaker {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Registers `waker` to be woken by the next [`wake`](Self::wake),
    /// replacing any waker registered before. A `wake` racing this call
    /// either wakes `waker` or happens before it (and then wakes the old
    /// one, if any).
    #[inline]
    pub(crate) fn register(&self, waker: &Waker) {
        #[cfg(not(pagestream_loom))]
        self.inner.register(waker);
        #[cfg(pagestream_loom)]
        self.inner.register_by_ref(waker);
    }

    /// Takes the registered waker, if any, and wakes it.
    #[inline]
    pub(crate) fn wake(&self) {
        self.inner.wake();
    }

    /// Takes the registered waker, if any, without waking it.
    #[inline]
    pub(crate) fn take(&self) -> Option<Waker> {
        #[cfg(not(pagestream_loom))]
        return self.inner.take();
        #[cfg(pagestream_loom)]
        return self.inner.take_waker();
    }
}
