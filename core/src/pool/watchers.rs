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
//! The hand-off cannot lose a wake-up: a watcher registers its waker, then
//! reads the release count, then the pins. A release unpins, then bumps the
//! count, then wakes whatever is registered: either the watcher sees the
//! released pins, or it is registered in time to be woken.

use crate::sync::{lock, AtomicU64, AtomicUsize, Mutex, Ordering};
use std::task::Waker;

#[derive(Debug, Default)]
pub(crate) struct Watchers {
    /// Times a stream released look-ahead pins (reset, close or drop).
    releases: AtomicU64,
    /// Registered watchers (checked before taking the lock on a release).
    count: AtomicUsize,
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
        self.releases.load(Ordering::SeqCst)
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
                self.count.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Removes the registration in `key`, if any.
    pub(crate) fn unregister(&self, key: &mut Option<usize>) {
        if let Some(k) = key.take() {
            let mut s = lock(&self.slots);
            s.wakers[k] = None;
            s.free.push(k);
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A stream has released pins: wakes every watcher so it looks again.
    pub(crate) fn released(&self) {
        self.releases.fetch_add(1, Ordering::SeqCst);
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let woken: Vec<Waker> = lock(&self.slots).wakers.iter().flatten().cloned().collect();
        // Outside the lock: a waker may poll and register again.
        for w in woken {
            w.wake();
        }
    }
}
