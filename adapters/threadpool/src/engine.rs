//! [`ThreadPoolEngine`]: blocking `preadv` on dedicated I/O threads, with an
//! inline `RWF_NOWAIT` attempt first so page-cache hits pay no thread hop.
//!
//! # Primed reads
//!
//! A read the planner gave `POSIX_FADV_WILLNEED` advice for just before
//! starting it is *primed*: the kernel has already been asked to read it (the
//! advice submits the device reads, and on Linux ≥ 5.9 the inline
//! `RWF_NOWAIT` attempt does too), so the I/O thread that takes it only waits
//! for the page cache and copies. Such reads do not need a thread each:
//! while a thread is busy, up to [`PRIMED_JOBS_PER_THREAD`] primed reads per
//! busy thread queue for it without waking or starting another. The busy
//! threads take them in order, usually finding them read already; each woken
//! thread would otherwise cost two context switches per read, which on a
//! small machine cost more CPU than the device time they hide (a bitmap scan
//! with read-ahead off spent about 65 µs of CPU per page, most of it waking
//! and switching 16 threads). Reads that are not primed (O_DIRECT, advice
//! off, a read continuing kernel read-ahead) still get a thread each, as
//! their thread is what submits them to the device. Priming only changes
//! which thread does a read and when, never what it reads.

use crate::file::{FileInner, ThreadPoolFile};
use crate::sys;
use pagestream::{IoEngine, ReadRequest};
use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Default number of I/O threads: enough for a stream's default `max_ios`
/// (16) reads to block at once.
pub const DEFAULT_THREADS: usize = 16;

/// Stack size of an I/O thread (it only runs `preadv` and completion).
const THREAD_STACK: usize = 256 * 1024;

/// Primed reads (see the [module docs](self)) that may queue per busy I/O
/// thread before another thread is woken or started for them: a stream's
/// default `max_ios` (16), so one stream's advised reads share one thread.
pub(crate) const PRIMED_JOBS_PER_THREAD: usize = 16;

thread_local! {
    /// The range the last [`IoEngine::advise`] on this thread covered:
    /// `(file identity, start, end)`. The planner advises a read right
    /// before starting it, on the same thread; `start_read` takes it to know
    /// whether the kernel was already asked to read the request.
    static ADVISED: Cell<Option<(usize, u64, u64)>> = const { Cell::new(None) };
}

/// Builds a [`ThreadPoolEngine`]; see [`ThreadPoolEngine::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ThreadPoolBuilder {
    threads: usize,
    nowait: bool,
    name: String,
}

impl ThreadPoolBuilder {
    /// Most I/O threads (at least 1; default [`DEFAULT_THREADS`]). Threads
    /// are started on demand, when more reads wait than threads are idle.
    /// Reads that block beyond this count queue.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Try each buffered read inline with `preadv2(RWF_NOWAIT)` first, so a
    /// page-cache hit completes on the calling thread (default on). Turned
    /// off by itself if the kernel does not support it.
    pub fn nowait(mut self, on: bool) -> Self {
        self.nowait = on;
        self
    }

    /// Name prefix of the I/O threads (default `"pagestream-io"`).
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Builds the engine. No thread starts before the first blocking read.
    pub fn build(self) -> ThreadPoolEngine {
        ThreadPoolEngine {
            handle: Arc::new(Handle {
                shared: Arc::new(Shared {
                    state: Mutex::new(State {
                        jobs: VecDeque::new(),
                        idle: 0,
                        threads: 0,
                        shutdown: false,
                    }),
                    cond: Condvar::new(),
                    max_threads: self.threads,
                    name: self.name,
                    nowait: AtomicBool::new(self.nowait),
                    counters: Counters::default(),
                }),
            }),
        }
    }
}

/// An [`IoEngine`] that reads with blocking `preadv` on a pool of dedicated
/// I/O threads, so it works under any executor. Cheap to clone (an `Arc`
/// inside); clones share the threads. The threads exit once every clone is
/// dropped and the reads queued to them are done.
///
/// On buffered files each read is first tried inline with
/// `preadv2(RWF_NOWAIT)`: if the page cache holds all of it, it completes on
/// the calling thread and is reported as served from cache; what the cache
/// does not hold goes to the I/O threads.
///
/// ```no_run
/// use futures::{executor::block_on, StreamExt};
/// use pagestream::{source, BufferPool, ReadStream};
/// use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};
///
/// let pool = BufferPool::new(1024, 8192)?;
/// let engine = ThreadPoolEngine::new();
/// let file = ThreadPoolFile::open("table.dat")?;
/// let nblocks = file.as_file().metadata()?.len() / 8192;
/// let mut stream = ReadStream::builder(&pool, engine, file).build(source::forward(0..nblocks))?;
/// block_on(async {
///     while let Some(page) = stream.next().await {
///         let _first_byte = page?[0];
///     }
///     Ok::<_, std::io::Error>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ThreadPoolEngine {
    handle: Arc<Handle>,
}

/// Counters of what the engine did, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Reads completed whole by the inline `RWF_NOWAIT` attempt.
    pub nowait_full: u64,
    /// Inline attempts that read part of the request (the rest went to a thread).
    pub nowait_partial: u64,
    /// Inline attempts that would have blocked (`EAGAIN`).
    pub nowait_would_block: u64,
    /// Time spent in inline `RWF_NOWAIT` attempts (mostly copying from the
    /// page cache), in nanoseconds.
    pub nowait_nanos: u64,
    /// Requests (or remainders) handed to the I/O threads.
    pub queued: u64,
    /// Of `queued`, those that were primed (advised just before they were
    /// started, so the kernel was already reading them): they queue for a
    /// busy thread instead of waking one each.
    pub queued_primed: u64,
    /// Blocking `preadv` calls made by the I/O threads.
    pub thread_preads: u64,
    /// I/O threads started.
    pub threads_started: u64,
}

#[derive(Default)]
struct Counters {
    nowait_full: AtomicU64,
    nowait_partial: AtomicU64,
    nowait_would_block: AtomicU64,
    nowait_nanos: AtomicU64,
    queued: AtomicU64,
    queued_primed: AtomicU64,
    thread_preads: AtomicU64,
    threads_started: AtomicU64,
}

/// Dropped when the last engine clone goes: tells the threads to exit.
struct Handle {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    cond: Condvar,
    max_threads: usize,
    name: String,
    nowait: AtomicBool,
    counters: Counters,
}

struct State {
    jobs: VecDeque<Job>,
    /// Threads waiting on `cond`.
    idle: usize,
    /// Threads alive.
    threads: usize,
    shutdown: bool,
}

struct Job {
    file: Arc<FileInner>,
    req: ReadRequest,
    /// The kernel was already asked to read this range (see the module
    /// docs): a busy thread may take it later instead of a new one now.
    primed: bool,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic on an I/O thread cannot leave `State` inconsistent (every
    // update is a single push, pop or counter change), so poisoning is moot.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for Handle {
    fn drop(&mut self) {
        lock(&self.shared.state).shutdown = true;
        self.shared.cond.notify_all();
    }
}

impl fmt::Debug for ThreadPoolEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.handle.shared;
        f.debug_struct("ThreadPoolEngine")
            .field("max_threads", &s.max_threads)
            .field("nowait", &s.nowait.load(Ordering::Relaxed))
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Default for ThreadPoolEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadPoolEngine {
    /// An engine with [`DEFAULT_THREADS`] threads and `RWF_NOWAIT` on.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Starts configuring an engine.
    pub fn builder() -> ThreadPoolBuilder {
        ThreadPoolBuilder {
            threads: DEFAULT_THREADS,
            nowait: true,
            name: "pagestream-io".into(),
        }
    }

    /// Whether inline `RWF_NOWAIT` attempts are on (they switch off by
    /// themselves if the kernel rejects the flag).
    pub fn nowait(&self) -> bool {
        self.handle.shared.nowait.load(Ordering::Relaxed)
    }

    /// Most I/O threads.
    pub fn max_threads(&self) -> usize {
        self.handle.shared.max_threads
    }

    /// What the engine has done so far (all clones together).
    pub fn stats(&self) -> EngineStats {
        let c = &self.handle.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EngineStats {
            nowait_full: l(&c.nowait_full),
            nowait_partial: l(&c.nowait_partial),
            nowait_would_block: l(&c.nowait_would_block),
            nowait_nanos: l(&c.nowait_nanos),
            queued: l(&c.queued),
            queued_primed: l(&c.queued_primed),
            thread_preads: l(&c.thread_preads),
            threads_started: l(&c.threads_started),
        }
    }
}

/// Reads as much of `req` as one `preadv2` gives, with `flags`.
fn read_once(file: &FileInner, req: &mut ReadRequest, flags: libc::c_int) -> io::Result<usize> {
    let offset = req.offset();
    let len = req.len_bytes();
    let bs = req.block_size();
    if file.direct {
        let a = file.align;
        if bs % a != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "block size {bs} is not a multiple of the {a}-byte alignment O_DIRECT \
                     needs on this file; use a block size that is a multiple of {a}"
                ),
            ));
        }
        // A short read's remainder starts inside a block.
        if offset % a as u64 != 0 || len % a != 0 {
            return read_bounced(file, req, flags);
        }
    }
    let mut bufs = req.buffers_mut();
    if file.direct {
        let m = file.mem_align;
        if bufs.iter().any(|b| b.as_ptr() as usize % m != 0) {
            drop(bufs);
            return read_bounced(file, req, flags);
        }
    }
    sys::preadv2(file.fd(), &mut bufs, offset, flags)
}

/// An O_DIRECT read whose remainder starts inside a block: reads the
/// enclosing aligned range into an aligned bounce buffer and copies the
/// requested bytes out.
fn read_bounced(file: &FileInner, req: &mut ReadRequest, flags: libc::c_int) -> io::Result<usize> {
    let a = file.align;
    let m = file.mem_align.max(a);
    let offset = req.offset();
    let len = req.len_bytes();
    let head = (offset % a as u64) as usize;
    let start = offset - head as u64;
    let span = (head + len).div_ceil(a) * a;
    let mut buf = vec![0u8; span + m];
    let pad = buf.as_ptr().align_offset(m);
    let aligned = &mut buf[pad..pad + span];
    let n = sys::preadv2(file.fd(), &mut [IoSliceMut::new(aligned)], start, flags)?;
    let useful = n.saturating_sub(head).min(len);
    Ok(req.copy_from(&aligned[head..head + useful]))
}

/// Reads `req` to the end on this thread, blocking, issuing remainders.
fn run(shared: &Shared, job: Job) {
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

fn worker(shared: Arc<Shared>) {
    let mut st = lock(&shared.state);
    loop {
        if let Some(job) = st.jobs.pop_front() {
            drop(st);
            // A panic while reading (a filter or hook of the request) drops
            // the request, which cancels it cleanly; the thread goes on, so
            // the pool never loses threads it counts as alive.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| run(&shared, job)));
            st = lock(&shared.state);
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
    fn submit(self: &Arc<Self>, job: Job) {
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        let primed = job.primed;
        if primed {
            self.counters.queued_primed.fetch_add(1, Ordering::Relaxed);
        }
        let mut st = lock(&self.state);
        st.jobs.push_back(job);
        // A busy thread looks at the queue again before it waits (`worker`
        // pops under this lock), so a primed read queued for it is never
        // stranded.
        let busy = st.threads - st.idle;
        if primed && busy > 0 && st.jobs.len() <= PRIMED_JOBS_PER_THREAD * busy {
            return;
        }
        if st.jobs.len() > st.idle && st.threads < self.max_threads {
            let shared = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name(format!("{}-{}", self.name, st.threads))
                .stack_size(THREAD_STACK)
                .spawn(move || worker(shared));
            match spawned {
                Ok(_) => {
                    st.threads += 1;
                    self.counters
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
                        run(self, job);
                    }
                    return;
                }
                Err(_) => {}
            }
        }
        if st.idle > 0 {
            self.cond.notify_one();
        }
    }
}

impl IoEngine for ThreadPoolEngine {
    type File = ThreadPoolFile;

    fn start_read(&self, file: &ThreadPoolFile, mut req: ReadRequest) {
        let shared = &self.handle.shared;
        let inner = &file.inner;
        let primed = ADVISED.take().is_some_and(|(id, start, end)| {
            id == Arc::as_ptr(inner) as usize
                && start <= req.offset()
                && req.offset() + req.len_bytes() as u64 <= end
        });
        if !inner.direct && shared.nowait.load(Ordering::Relaxed) {
            let c = &shared.counters;
            let t = Instant::now();
            let r = read_once(inner, &mut req, libc::RWF_NOWAIT);
            let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
            c.nowait_nanos.fetch_add(ns, Ordering::Relaxed);
            match r {
                Ok(n) if n == req.len_bytes() => {
                    c.nowait_full.fetch_add(1, Ordering::Relaxed);
                    req.set_served_from_cache(true);
                    match req.complete(Ok(n)) {
                        None => return,
                        Some(rest) => req = rest,
                    }
                }
                // Zero bytes: end of file, or nothing cached at the offset;
                // the blocking read tells which.
                Ok(0) => {
                    c.nowait_would_block.fetch_add(1, Ordering::Relaxed);
                }
                Ok(n) => {
                    c.nowait_partial.fetch_add(1, Ordering::Relaxed);
                    match req.complete(Ok(n)) {
                        None => return,
                        Some(rest) => req = rest,
                    }
                }
                Err(e) => {
                    match e.raw_os_error() {
                        Some(libc::EAGAIN) => {
                            c.nowait_would_block.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
                            shared.nowait.store(false, Ordering::Relaxed);
                        }
                        // Anything else: the blocking read reports it.
                        _ => {}
                    }
                }
            }
        }
        shared.submit(Job {
            file: Arc::clone(inner),
            req,
            primed,
        });
    }

    fn advice_useful(&self, file: &ThreadPoolFile) -> bool {
        !file.inner.direct
    }

    fn advise(&self, file: &ThreadPoolFile, offset: u64, len: u64) {
        let inner = &file.inner;
        if inner.direct || len == 0 {
            return;
        }
        // Advice is only a hint: an error is ignored (and the read it
        // announces is then not treated as primed).
        if sys::fadvise(inner.fd(), offset, len, libc::POSIX_FADV_WILLNEED).is_ok() {
            ADVISED.set(Some((
                Arc::as_ptr(inner) as usize,
                offset,
                offset.saturating_add(len),
            )));
        }
    }

    fn name(&self) -> &'static str {
        "threadpool"
    }
}
