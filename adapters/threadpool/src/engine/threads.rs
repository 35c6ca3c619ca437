//! The I/O threads and their job queue.

use super::read::read_once;
use super::{contain_panic, Shared};
use crate::file::FileInner;
use crate::sync::{spawn, Arc, Mutex, MutexGuard, PoisonError};
use pagestream::ReadRequest;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;

/// Stack size of an I/O thread (it only runs `preadv` and completion).
pub(super) const THREAD_STACK: usize = 256 * 1024;

/// Primed reads (see the [module docs](self)) that may queue per busy I/O
/// thread before another thread is woken or started for them: a stream's
/// default `max_ios` (16), so one stream's advised reads share one thread.
pub(crate) const PRIMED_JOBS_PER_THREAD: usize = 16;

pub(super) struct State {
    pub(super) jobs: VecDeque<Job>,
    /// Threads waiting on `cond`.
    pub(super) idle: usize,
    /// Threads alive.
    pub(super) threads: usize,
    /// Threads busy with a primed read (see the module docs).
    pub(super) primed_busy: usize,
    pub(super) shutdown: bool,
}

pub(super) struct Job {
    pub(super) file: Arc<FileInner>,
    pub(super) req: ReadRequest,
    /// The kernel was already asked to read this range (see the module
    /// docs): a busy thread may take it later instead of a new one now.
    pub(super) primed: bool,
}

pub(super) fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic on an I/O thread cannot leave `State` inconsistent (every
    // update is a single push, pop or counter change), so poisoning is moot.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads `req` to the end on this thread, blocking, issuing remainders.
pub(super) fn run(shared: &Shared, job: Job) {
    let Job { file, mut req, .. } = job;
    loop {
        shared
            .counters
            .thread_preads
            .fetch_add(1, Ordering::Relaxed);
        let r = match read_once(&file, &mut req, 0) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => r,
        };
        match req.complete(r) {
            Some(rest) => req = rest,
            None => return,
        }
    }
}

pub(super) fn worker(shared: Arc<Shared>) {
    let mut st = lock(&shared.state);
    loop {
        if let Some(job) = st.jobs.pop_front() {
            let primed = job.primed;
            st.primed_busy += usize::from(primed);
            drop(st);
            // A panic while reading (a filter or hook of the request) drops
            // the request, which cancels it cleanly; the thread goes on, so
            // the pool never loses threads it counts as alive.
            contain_panic(|| run(&shared, job));
            st = lock(&shared.state);
            st.primed_busy -= usize::from(primed);
            continue;
        }
        if st.shutdown {
            st.threads -= 1;
            return;
        }
        st.idle += 1;
        st = shared.cond.wait(st).unwrap_or_else(PoisonError::into_inner);
        st.idle -= 1;
    }
}

impl Shared {
    pub(super) fn submit(this: &Arc<Self>, job: Job) {
        this.counters.queued.fetch_add(1, Ordering::Relaxed);
        let primed = job.primed;
        if primed {
            this.counters.queued_primed.fetch_add(1, Ordering::Relaxed);
        }
        let mut st = lock(&this.state);
        st.jobs.push_back(job);
        // A primed read may wait for a thread busy with another primed
        // read instead of starting a thread: that read is already being
        // read by the kernel, so it ends without a device wait of its own,
        // and its thread looks at the queue again before it waits (`worker`
        // pops under this lock), so the queued read is never stranded.
        // It never waits while a thread is idle (one is woken below), nor
        // behind threads that are all on reads that are not primed (a
        // device read of their own, or a file that blocks for as long as
        // it likes): those may take any time.
        let behind_primed = primed
            && st.primed_busy > 0
            && st.jobs.len() <= PRIMED_JOBS_PER_THREAD * st.primed_busy;
        if !behind_primed && st.jobs.len() > st.idle && st.threads < this.max_threads {
            let shared = Arc::clone(this);
            let spawned = spawn(
                format!("{}-{}", this.name, st.threads),
                THREAD_STACK,
                move || worker(shared),
            );
            match spawned {
                Ok(()) => {
                    st.threads += 1;
                    this.counters
                        .threads_started
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(_) if st.threads == 0 => {
                    // No thread to hand the read to: do it here rather than
                    // never. (Blocks the caller; only when threads cannot be
                    // created at all.)
                    let jobs: Vec<Job> = st.jobs.drain(..).collect();
                    drop(st);
                    for job in jobs {
                        run(this, job);
                    }
                    return;
                }
                Err(_) => {}
            }
        }
        if st.idle > 0 {
            this.cond.notify_one();
        }
    }
}
