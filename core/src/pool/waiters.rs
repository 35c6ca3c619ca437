//! Tasks waiting for another read to finish a frame.
//!
//! Waiting is the slow path (a second stream wants a block a first stream is
//! reading), so the table is a few mutex-protected lists sharded by frame,
//! and the hot path never touches it: a finishing read looks here only when
//! the frame's `WAITERS` bit is set.
//!
//! The hand-off cannot lose a wake-up: a waiter takes the shard lock, sets
//! `WAITERS`, and re-checks the status *after* setting it; the finisher
//! changes the status and clears `WAITERS` in one atomic step, then takes the
//! same shard lock to wake. Either the waiter sees the new status, or the
//! finisher sees the bit and finds the waker in the list.

use super::frame::{self, FrameHeader, Status};
use crate::sync::{lock, Mutex, Ordering};
use std::task::Waker;

const SHARDS: usize = 64;

/// Waiting tasks: `(frame, waker)` pairs.
type Shard = Mutex<Vec<(u32, Waker)>>;

#[derive(Debug)]
pub(crate) struct Waiters {
    shards: Box<[Shard]>,
}

impl Waiters {
    pub(crate) fn new() -> Self {
        Waiters {
            shards: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// Registers `waker` to be woken when frame `f` leaves IO. Returns false
    /// (and registers nothing) if it already has.
    pub(crate) fn register(&self, f: u32, hdr: &FrameHeader, waker: &Waker) -> bool {
        let mut list = lock(&self.shards[f as usize % SHARDS]);
        // Set WAITERS only while the frame is being read, so a frame whose
        // read has ended is not left with a stale bit.
        let mut s = hdr.state.load(Ordering::Acquire);
        loop {
            if frame::status(s) != Status::Io {
                return false;
            }
            if s & frame::WAITERS != 0 {
                break;
            }
            match hdr.state.compare_exchange_weak(
                s,
                s | frame::WAITERS,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(cur) => s = cur,
            }
        }
        if !list.iter().any(|(g, w)| *g == f && w.will_wake(waker)) {
            list.push((f, waker.clone()));
        }
        true
    }

    /// Wakes everything waiting on `f`. Called by the finisher after it
    /// cleared `WAITERS`.
    pub(crate) fn wake(&self, f: u32) {
        let mut woken = Vec::new();
        {
            let mut list = lock(&self.shards[f as usize % SHARDS]);
            list.retain(|(g, w)| {
                if *g == f {
                    woken.push(w.clone());
                    false
                } else {
                    true
                }
            });
        }
        // Wake outside the lock: a waker may run code that registers again.
        for w in woken {
            w.wake();
        }
    }
}
