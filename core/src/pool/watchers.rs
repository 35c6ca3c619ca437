//! Reads waiting to hear that no stream wants them any more.
//!
//! An engine whose reads are expensive to finish (a range GET of megabytes
//! from object storage) may abort a read nobody will take: the stream that
//! started it was dropped or reset, and no other stream holds one of its
//! pages. Pins on a read's frames are released only when a stream resets,
//! closes or is dropped (a page is handed out only once its read is over),
//! so those are the moments such a read can become unwanted: each one bumps
//! the pool's release count and wakes every registered watcher, which then
//! looks at its frames' pins again ([`crate::engine::Abandoned`]).
//!
//! The hand-off cannot lose a wake-up: a watcher registers its waker under
//! the lock, then reads the release count, then the pins. A release unpins,
//! bumps the count, then takes the same lock and wakes whatever is
//! registered. If the release takes the lock first, the watcher's lock
//! comes after it and the watcher sees the pins released; otherwise the
//! release finds the waker. (A check of a watcher count outside the lock
//! would save a release the lock, but only under sequential consistency of
//! two variables, which `pool/loom_tests.rs` cannot check: releases are rare
//! enough to take it.)

use crate::sync::{lock, AtomicU64, Mutex, Ordering};
use std::task::Waker;

#[derive(Debug, Default)]
pub(crate) struct Watchers {
    /// Times a stream released look-ahead pins (reset, close or drop).
    releases: AtomicU64,
    slots: Mutex<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    wakers: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Watchers {
    /// The release count: read after registering, before looking at pins.
    pub(crate) fn releases(&self) -> u64 {
        self.releases.load(Ordering::Acquire)
    }

    /// Registers `waker` (in `key`'s slot if it has one, else in a new slot
    /// whose key is stored in `key`).
    pub(crate) fn register(&self, key: &mut Option<usize>, waker: &Waker) {
        let mut s = lock(&self.slots);
        match *key {
            Some(k) => match &mut s.wakers[k] {
                Some(w) if w.will_wake(waker) => {}
                slot => *slot = Some(waker.clone()),
            },
            None => {
                let k = match s.free.pop() {
                    Some(k) => {
                        s.wakers[k] = Some(waker.clone());
                        k
                    }
                    None => {
                        s.wakers.push(Some(waker.clone()));
                        s.wakers.len() - 1
                    }
                };
                *key = Some(k);
            }
        }
    }

    /// Removes the registration in `key`, if any.
    pub(crate) fn unregister(&self, key: &mut Option<usize>) {
        if let Some(k) = key.take() {
            let mut s = lock(&self.slots);
            s.wakers[k] = None;
            s.free.push(k);
        }
    }

    /// A stream has released pins: wakes every watcher so it looks again.
    pub(crate) fn released(&self) {
        self.releases.fetch_add(1, Ordering::AcqRel);
        let woken: Vec<Waker> = lock(&self.slots).wakers.iter().flatten().cloned().collect();
        if woken.is_empty() {
            return;
        }
        // Outside the lock: a waker may poll and register again.
        for w in woken {
            w.wake();
        }
    }
}
