//! The cached-read helper.

use super::read::read_nowait;
use super::threads::{Job, THREAD_STACK};
use super::{contain_panic, Shared};
use crate::file::FileInner;
use crate::sync::{spawn, Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use crate::sys;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Default cached reads in flight ([`ThreadPoolBuilder::cached_reads`](crate::ThreadPoolBuilder::cached_reads))
/// where there is a second CPU.
pub const DEFAULT_CACHED_DEPTH: usize = 6;

/// How long the helper leaves a lone queued read to the stream that
/// started it before it reads it itself (so that a read whose stream is
/// not polled still completes).
pub(super) const HELPER_LINGER: Duration = Duration::from_millis(1);

/// Whether a lone job's linger, which ends at `deadline`, is over. Never
/// under loom: loom does not model time (its `wait_timeout` never times
/// out), so the linger is made endless, a deterministic choice. In the
/// models a lone job is then done only by its stream's help, by the helper
/// once a second job is queued, or at shutdown; one that none of those
/// reaches stays queued, and loom reports the threads left blocked.
fn linger_over(deadline: Instant) -> bool {
    !cfg!(pagestream_loom) && Instant::now() >= deadline
}

pub(super) fn default_cached_depth() -> usize {
    match std::thread::available_parallelism() {
        Ok(n) if n.get() > 1 => DEFAULT_CACHED_DEPTH,
        _ => 0,
    }
}

/// The cached-read queue (see the module docs).
pub(super) struct Helper {
    pub(super) state: Mutex<HelperState>,
    pub(super) cond: Condvar,
}

pub(super) struct HelperState {
    /// Reads the page cache is expected to hold, oldest first.
    pub(super) jobs: VecDeque<Job>,
    /// Jobs ever pushed (tells the helper whether a lone job is new).
    pub(super) pushed: u64,
    /// How the helper thread waits on `cond`, if it does.
    pub(super) sleeping: Sleep,
    /// The helper thread was started.
    pub(super) started: bool,
    pub(super) shutdown: bool,
}

/// How the helper thread waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sleep {
    /// It does not.
    No,
    /// For fewer than two jobs to become two, or for its lone job's linger
    /// to end.
    Timed,
    /// For any job: the queue was empty.
    Untimed,
}

pub(super) fn lock_helper(m: &Mutex<HelperState>) -> MutexGuard<'_, HelperState> {
    // As for `State`: every update is a single push, pop or flag change.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Does a queued cached read: inline `RWF_NOWAIT`, and what the cache did
/// not hold goes to the I/O threads.
pub(super) fn run_cached(shared: &Arc<Shared>, job: Job) {
    let Job { file, req, primed } = job;
    if let Some(rest) = read_nowait(shared, &file, req) {
        Shared::submit(
            shared,
            Job {
                file,
                req: rest,
                primed,
            },
        );
    }
}

/// The helper thread: takes the newest queued cached read while at least
/// two are queued (the oldest is the one a stream will want first, and it
/// reads that one itself, see [`IoEngine::help`]); a lone read only once
/// it has waited [`HELPER_LINGER`]. Sleeps otherwise, and never spins.
/// Runs at `SCHED_IDLE`.
pub(super) fn helper(shared: Arc<Shared>) {
    // Only otherwise idle CPU time: on a machine whose CPUs are all busy
    // the helper would take time from the consumer it is meant to help
    // (see `docs/engines.md`). Where the kernel refuses, it runs at normal
    // priority.
    //
    // A thread inherits its creator's CPU affinity, and the helper is
    // created by whichever stream first queues a read: a consumer pinned
    // to one CPU would pin the helper to that same CPU, where it could
    // never run beside it. Use the process's mask instead (errors, such as
    // more CPUs than a `cpu_set_t` holds, leave the inherited one).
    //
    // Not under loom, whose threads all run on the test's own OS thread:
    // these would apply to that thread.
    if !cfg!(pagestream_loom) {
        let _ = sys::set_idle_priority();
        let _ = sys::set_process_affinity();
    }
    let h = &shared.helper;
    let mut st = lock_helper(&h.state);
    // The lone job we left, as `(pushed, deadline)`.
    let mut lone: Option<(u64, Instant)> = None;
    loop {
        let n = st.jobs.len();
        let lone_due = n == 1
            && matches!(lone, Some((p, deadline)) if p == st.pushed && linger_over(deadline));
        if n >= 2 || (n == 1 && st.shutdown) || lone_due {
            let job = st.jobs.pop_back().expect("a queued job");
            drop(st);
            // As on the I/O threads, a panic drops (cancels) the request
            // and the helper goes on.
            contain_panic(|| run_cached(&shared, job));
            // Counted once done, so a count that matches the jobs queued
            // means they have all been published.
            shared.counters.helper_reads.fetch_add(1, Ordering::Relaxed);
            lone = None;
            st = lock_helper(&h.state);
            continue;
        }
        if n == 0 && st.shutdown {
            st.started = false;
            return;
        }
        shared
            .counters
            .helper_sleeps
            .fetch_add(1, Ordering::Relaxed);
        if n == 1 {
            st.sleeping = Sleep::Timed;
            let now = Instant::now();
            let (p, deadline) = match lone {
                Some((p, d)) if p == st.pushed => (p, d),
                _ => (st.pushed, now + HELPER_LINGER),
            };
            lone = Some((p, deadline));
            st = h
                .cond
                .wait_timeout(st, deadline.saturating_duration_since(now))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        } else {
            lone = None;
            st.sleeping = Sleep::Untimed;
            st = h.cond.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.sleeping = Sleep::No;
    }
}

impl Shared {
    /// Queues a read the page cache most likely holds, for the helper
    /// thread or the stream itself (see the module docs). Returns the job
    /// back, unqueued, if the queue's lock is held (by the helper, perhaps
    /// preempted at `SCHED_IDLE`, or another stream): the caller then reads
    /// it inline rather than wait for the lock.
    pub(super) fn queue_cached(this: &Arc<Self>, job: Job) -> Option<Job> {
        let h = &this.helper;
        let mut st = match h.state.try_lock() {
            Ok(st) => st,
            // As in `lock_helper`: poisoning is moot.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                this.counters
                    .cached_contended
                    .fetch_add(1, Ordering::Relaxed);
                return Some(job);
            }
        };
        this.counters.cached_queued.fetch_add(1, Ordering::Relaxed);
        st.jobs.push_back(job);
        st.pushed += 1;
        if !st.started {
            let shared = Arc::clone(this);
            let spawned = spawn(format!("{}-cached", this.name), THREAD_STACK, move || {
                helper(shared)
            });
            if spawned.is_err() {
                // No helper: the read is done here and now, as without one.
                let job = st.jobs.pop_back().expect("the job just queued");
                drop(st);
                run_cached(this, job);
                // Counted as helped, so that `cached_queued` still adds up.
                this.counters.helped_reads.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            st.started = true;
        } else if match st.sleeping {
            Sleep::No => false,
            // Two jobs: one to take. (One is left to its stream, and to
            // the linger already armed.)
            Sleep::Timed => st.jobs.len() >= 2,
            // The first job: the helper arms its linger for it, so that it
            // completes even if its stream is never polled again.
            Sleep::Untimed => true,
        } {
            st.sleeping = Sleep::No;
            h.cond.notify_one();
        }
        None
    }

    /// Does the oldest queued cached read of `file` on this thread, if
    /// there is one. Reads of other files are left alone: their streams'
    /// filters and hooks do not run inside this stream's poll. "Of `file`"
    /// means the same file as the pool sees it (the same [`FileId`]), so a
    /// stream waiting for a frame another stream of the same file is
    /// reading, through another handle, can do that read too.
    ///
    /// [`FileId`]: pagestream::FileId
    pub(super) fn help(this: &Arc<Self>, file: &FileInner) -> bool {
        let job = {
            let mut st = lock_helper(&this.helper.state);
            let i = st.jobs.iter().position(|j| j.file.id() == file.id());
            i.and_then(|i| st.jobs.remove(i))
        };
        let Some(job) = job else {
            return false;
        };
        // As on the I/O threads and the helper, a panic in the request's
        // filters or hooks is caught here: it does not unwind through this
        // stream's poll (the request may be another stream's). A filter's
        // panic drops the request, which cancels it.
        contain_panic(|| run_cached(this, job));
        this.counters.helped_reads.fetch_add(1, Ordering::Relaxed);
        true
    }
}
