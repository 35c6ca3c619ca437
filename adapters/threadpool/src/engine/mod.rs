//! [`ThreadPoolEngine`]: blocking `preadv` on dedicated I/O threads, with an
//! inline `RWF_NOWAIT` attempt first so page-cache hits pay no thread hop.
//!
//! # Cached reads: a helper thread on the second CPU
//!
//! A read served from the OS page cache is a copy, and in a warm scan the
//! copy is about three quarters of the time. Done inline it is all on the
//! consumer's CPU; on a machine with a second CPU the engine shares it with
//! one *helper* thread, in parallel with the consumer, without the consumer
//! ever waiting for a thread that is asleep (waking one took about 85 µs
//! on the development VM, seven reads' worth of copying):
//!
//! - Once an inline `RWF_NOWAIT` attempt on a file has found all of its
//!   read cached, the file's next reads are *queued* instead (the file is
//!   *warm*); the first that the cache does not hold whole makes it cold
//!   again, and its remainder goes to the I/O threads as before.
//! - The engine asks streams to keep [`cached_depth`] full-sized reads in
//!   flight while their reads are served from the cache
//!   ([`IoEngine::cached_read_depth`]), so the queue holds several.
//! - The helper takes the **newest** queued read while at least two are
//!   queued; the oldest is the one its stream wants first. A stream about
//!   to wait for a read does the **oldest** queued read of its file itself
//!   ([`IoEngine::help`]; never another file's, whose hooks would then
//!   run in its poll), so it is never left waiting for a queued read
//!   and rarely for one the helper is copying. A lone read the helper
//!   leaves for a millisecond it takes anyway, so a read whose stream is
//!   not polled still completes. The helper sleeps when it has nothing to
//!   take and is woken when two reads are queued (or one, into an empty
//!   queue, to arm that linger): it never spins.
//!
//! A warm 1 GiB scan through a 256 KiB ring went from about 0.81x a plain
//! 128 KiB `read()` loop to 1.0–1.2x on the 2-CPU development VM (the
//! helper did about half the reads); fewer reads in flight leave the helper
//! asleep more often (4: about 0.9–1.0x; 2: 0.6x, worse than inline).
//! With one CPU, or [`cached_depth`] 0 or 1, every cached read is done
//! inline as before.
//!
//! The helper runs at `SCHED_IDLE`, on CPU time nothing else wants: beside
//! a CPU-bound process a normal-priority helper took time from the very
//! consumer it helps (0.54–0.96x of the read loop, against 0.80–0.85x
//! with every read inline); at `SCHED_IDLE` it does almost nothing there
//! (0.77–0.85x) and on an idle CPU as much as before. The price is that a
//! helper preempted in the middle of a copy can make its stream wait for
//! it (a few waits of about a millisecond in some runs). It takes the
//! process's CPU affinity when it starts, not that of the consumer whose
//! read started it (a consumer pinned to one CPU would otherwise pin its
//! helper beside it).
//!
//! **Known limitation: priority inversion under CPU contention.** A
//! `SCHED_IDLE` thread gets a tiny share of a busy CPU (weight 3 against
//! 1024 for a normal thread), so a helper preempted at the wrong moment
//! can hold up a normal-priority consumer for much longer than its copy
//! takes. Queueing a read never waits for the queue's lock: if it is
//! taken, the read is done inline instead
//! ([`EngineStats::cached_contended`]). Two waits remain: a stream about
//! to wait takes that lock to look for reads of its file (the helper holds
//! it only to pop a read or go to sleep, but may be preempted while it
//! does), and a read the helper has taken completes only when the helper
//! next runs. Neither is bounded while every CPU is busy with normal
//! threads; `cached_depth` 0 avoids both.
//!
//! [`cached_depth`]: ThreadPoolBuilder::cached_depth
//!
//! # Primed reads
//!
//! A read the planner gave `POSIX_FADV_WILLNEED` advice for just before
//! starting it is *primed*: the kernel has already been asked to read it (the
//! advice submits the device reads, and on Linux ≥ 5.9 the inline
//! `RWF_NOWAIT` attempt does too), so the I/O thread that takes it only waits
//! for the page cache and copies. Such reads do not need a thread each:
//! while a thread is busy with a primed read, up to
//! [`PRIMED_JOBS_PER_THREAD`] primed reads per such thread queue for it
//! without starting another. The busy threads take them in order, usually
//! finding them read already; a thread each would otherwise cost two
//! context switches per read, which on a small machine cost more CPU than
//! the device time they hide (a bitmap scan with read-ahead off spent about
//! 65 µs of CPU per page, most of it waking and switching 16 threads). A
//! queued read never waits while a thread is idle (the idle thread is woken
//! for it), nor behind threads busy only with reads that are not primed,
//! whose device reads (or files) may take any time. Reads that are not
//! primed (O_DIRECT, advice off, a read continuing kernel read-ahead) still
//! get a thread each, as their thread is what submits them to the device.
//! Priming only changes which thread does a read and when, never what it
//! reads.
//!
//! # O_DIRECT reads: native AIO
//!
//! An O_DIRECT read has no page cache to prime, so on a thread it costs a
//! thread wake to start and a context switch to finish, each on the
//! critical path (a bitmap scan spent about 46 µs of CPU per page, against
//! 17 µs for io_uring, and kept only 2–4 reads at the device out of 16).
//! Aligned O_DIRECT reads are therefore submitted inline with Linux native
//! AIO (`io_submit`, `RWF_NOWAIT`, which never waits for the device), and one
//! reaper thread per engine collects their completions in batches
//! (`io_getevents`) and completes the requests there. A read AIO cannot take
//! (it would block, a short read's remainder, an unaligned buffer, no AIO in
//! the kernel) goes to the I/O threads as before.

use crate::file::{FileInner, ThreadPoolFile};
use crate::sys;
use pagestream::{IoEngine, ReadRequest};
use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSliceMut};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

/// Default number of I/O threads: enough for a stream's default `max_ios`
/// (16) reads to block at once.
pub const DEFAULT_THREADS: usize = 16;

/// Stack size of an I/O thread (it only runs `preadv` and completion).
const THREAD_STACK: usize = 256 * 1024;

/// Primed reads (see the [module docs](self)) that may queue per busy I/O
/// thread before another thread is woken or started for them: a stream's
/// default `max_ios` (16), so one stream's advised reads share one thread.
pub(crate) const PRIMED_JOBS_PER_THREAD: usize = 16;

/// Default [`ThreadPoolBuilder::aio_events`].
pub const DEFAULT_AIO_EVENTS: u32 = 256;

/// How long the AIO reaper waits for a completion before it looks whether
/// the engine was dropped.
const AIO_IDLE_POLL: Duration = Duration::from_millis(200);

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
    cached_depth: usize,
    aio: bool,
    aio_events: u32,
    blocking_inline: bool,
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

    /// Submit aligned O_DIRECT reads with Linux native AIO from the calling
    /// thread, with one reaper thread completing them, instead of one I/O
    /// thread per read (default on). Turned off by itself if the kernel
    /// has no AIO.
    ///
    /// Where the AIO context cannot be made (`io_setup` fails: `ENOSYS`
    /// where a seccomp filter or the kernel leaves AIO out, `EAGAIN` once
    /// the system-wide `fs.aio-max-nr` is used up), or the kernel refuses
    /// AIO reads outright, the engine reads O_DIRECT on its I/O threads
    /// instead, and [`EngineStats::aio_unavailable`] says why.
    pub fn aio(mut self, on: bool) -> Self {
        self.aio = on;
        self
    }

    /// Events the engine's AIO context holds (at least 1; default
    /// [`DEFAULT_AIO_EVENTS`]): the most O_DIRECT reads in flight through
    /// AIO at once (more go to the I/O threads). The context reserves them
    /// against the system-wide `fs.aio-max-nr` (`/proc/sys/fs/aio-max-nr`)
    /// for the engine's life; asking for more than is left there makes
    /// AIO unavailable to the engine (see [`aio`](Self::aio)).
    pub fn aio_events(mut self, n: u32) -> Self {
        self.aio_events = n.max(1);
        self
    }

    /// Reads that would go to an I/O thread are read on the calling thread
    /// instead, with a blocking `preadv` (default off). This breaks the
    /// engine's promise not to block the thread that polls the stream, so
    /// use it only where that thread is yours alone (a stream driven by
    /// `futures::executor::block_on` on a dedicated thread, as a
    /// PostgreSQL backend does its synchronous I/O), never under a shared
    /// executor such as tokio, where it stalls every task on that thread
    /// for each device read. It saves the two thread hops a read otherwise
    /// costs, which is worth it with `max_ios = 0` (one read at a time,
    /// nothing to overlap); with deeper `max_ios` it serialises reads that
    /// the threads would overlap, so it loses. O_DIRECT reads that native
    /// AIO takes do not block either way (turn [`aio`](Self::aio) off too
    /// to read those inline).
    pub fn blocking_inline(mut self, on: bool) -> Self {
        self.blocking_inline = on;
        self
    }

    /// Cached reads in flight per stream with the cached-read helper (see
    /// the comment at the top of `src/engine.rs`); 0 or 1 turns the helper
    /// off and reads every cached read inline. At most [`MAX_IOS`](pagestream::MAX_IOS)
    /// (a larger value is taken as that). Default [`DEFAULT_CACHED_DEPTH`]
    /// on a machine with more than one CPU, else 0.
    pub fn cached_depth(mut self, reads: usize) -> Self {
        self.cached_depth = reads.min(pagestream::MAX_IOS);
        self
    }

    /// Name prefix of the engine's threads (default `"ps-io"`): the I/O
    /// threads are `PREFIX-0`, `PREFIX-1`, …, the AIO reaper `PREFIX-aio`
    /// and the cached-read helper `PREFIX-cached`. Linux keeps the first
    /// 15 bytes of a thread's name (`comm`), so a prefix of up to 8 bytes
    /// shows whole.
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Builds the engine. No thread starts before the first blocking read
    /// (or, for the cached-read helper, the first queued cached read).
    pub fn build(self) -> ThreadPoolEngine {
        ThreadPoolEngine {
            handle: Arc::new(Handle {
                shared: Arc::new(Shared {
                    state: Mutex::new(State {
                        jobs: VecDeque::new(),
                        idle: 0,
                        threads: 0,
                        primed_busy: 0,
                        shutdown: false,
                    }),
                    cond: Condvar::new(),
                    max_threads: self.threads,
                    name: self.name,
                    nowait: AtomicBool::new(self.nowait),
                    aio_on: AtomicBool::new(self.aio),
                    aio_events: self.aio_events,
                    aio_unavailable: AtomicI32::new(0),
                    blocking_inline: self.blocking_inline,
                    cached_depth: if self.blocking_inline || self.cached_depth < 2 {
                        0
                    } else {
                        self.cached_depth
                    },
                    helper: Helper {
                        state: Mutex::new(HelperState {
                            jobs: VecDeque::new(),
                            pushed: 0,
                            sleeping: Sleep::No,
                            started: false,
                            shutdown: false,
                        }),
                        cond: Condvar::new(),
                    },
                    aio: Mutex::new(AioSlot::Untried),
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
/// does not hold goes to the I/O threads. Once a file's reads are found
/// cached, its next reads are shared between the calling thread and a
/// helper thread instead (see the comment at the top of `src/engine.rs`).
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
    /// started, so the kernel was already reading them): they may queue
    /// for a thread busy with another primed read instead of starting one
    /// each (an idle thread is always woken for them).
    pub queued_primed: u64,
    /// Blocking `preadv` calls made by the I/O threads (or, with
    /// [`ThreadPoolBuilder::blocking_inline`], on the calling thread).
    pub thread_preads: u64,
    /// Reads done blocking on the calling thread
    /// ([`ThreadPoolBuilder::blocking_inline`]).
    pub inline_blocking_reads: u64,
    /// O_DIRECT reads submitted inline with native AIO.
    pub aio_reads: u64,
    /// O_DIRECT reads AIO did not take (it would have blocked, or the
    /// kernel refused it, or AIO is unavailable) that went to the I/O
    /// threads instead.
    pub aio_fallbacks: u64,
    /// Why native AIO is unavailable to this engine, if it is: the `errno`
    /// of the failure that switched it off (`io_setup` failing, such as
    /// `ENOSYS` under a seccomp filter or `EAGAIN` once `fs.aio-max-nr` is
    /// used up; the reaper thread not starting; the kernel refusing AIO
    /// reads or `RWF_NOWAIT` on them). Every O_DIRECT read is then read on
    /// the I/O threads; none is lost to it. `None` while AIO works, has not
    /// been tried, or was turned off with [`ThreadPoolBuilder::aio`].
    pub aio_unavailable: Option<i32>,
    /// I/O threads started.
    pub threads_started: u64,
    /// Cached reads queued for the helper thread (see the module docs).
    pub cached_queued: u64,
    /// Of those, reads the helper thread did (counted once done).
    pub helper_reads: u64,
    /// Of those, reads a stream did itself while it would have waited
    /// (counted once done).
    pub helped_reads: u64,
    /// Times the helper thread went to sleep.
    pub helper_sleeps: u64,
    /// Cached reads read inline instead of queued because the queue's lock
    /// was held at that moment (not counted in `cached_queued`).
    pub cached_contended: u64,
}

/// One line per part of the engine: inline attempts, thread reads, AIO
/// (with why it is unavailable, if it is), the cached-read helper.
impl fmt::Display for EngineStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Inline RWF_NOWAIT: full={} partial={} would block={} ({:.3} ms)",
            self.nowait_full,
            self.nowait_partial,
            self.nowait_would_block,
            self.nowait_nanos as f64 / 1e6
        )?;
        writeln!(
            f,
            "Threads: queued={} (primed={}) preads={} inline blocking={} started={}",
            self.queued,
            self.queued_primed,
            self.thread_preads,
            self.inline_blocking_reads,
            self.threads_started
        )?;
        write!(
            f,
            "AIO: reads={} fallbacks={}",
            self.aio_reads, self.aio_fallbacks
        )?;
        if let Some(e) = self.aio_unavailable {
            write!(
                f,
                "  aio unavailable: {}, reads on threads",
                io::Error::from_raw_os_error(e)
            )?;
        }
        writeln!(f)?;
        write!(
            f,
            "Cached-read helper: queued={} helper={} helped={} sleeps={} contended={}",
            self.cached_queued,
            self.helper_reads,
            self.helped_reads,
            self.helper_sleeps,
            self.cached_contended
        )
    }
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
    inline_blocking_reads: AtomicU64,
    aio_reads: AtomicU64,
    aio_fallbacks: AtomicU64,
    threads_started: AtomicU64,
    cached_queued: AtomicU64,
    helper_reads: AtomicU64,
    helped_reads: AtomicU64,
    helper_sleeps: AtomicU64,
    cached_contended: AtomicU64,
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
    /// AIO for O_DIRECT reads wanted and not (yet) found unavailable.
    aio_on: AtomicBool,
    /// Events to ask `io_setup` for.
    aio_events: u32,
    /// The errno that made AIO unavailable; 0: none did.
    aio_unavailable: AtomicI32,
    /// Read on the calling thread instead of the I/O threads.
    blocking_inline: bool,
    /// Cached reads per stream in flight through the helper; 0: no helper.
    cached_depth: usize,
    /// The cached-read queue and its helper thread.
    helper: Helper,
    /// The AIO context and its reaper, made at the first O_DIRECT read.
    aio: Mutex<AioSlot>,
    counters: Counters,
}

/// Whether an engine has its AIO context.
enum AioSlot {
    /// Not made yet.
    Untried,
    /// Made, with its reaper running.
    Ready(Arc<Aio>),
    /// Could not be made (see [`EngineStats::aio_unavailable`]); not
    /// tried again.
    Failed,
}

/// An engine's AIO context. The reaper thread holds it (and the `Shared`)
/// until the engine is dropped and no AIO read is in flight.
struct Aio {
    ctx: sys::aio::Context,
    /// Reads submitted and not yet reaped.
    in_flight: AtomicUsize,
}

/// An O_DIRECT read in flight through AIO: boxed, its address is the AIO
/// tag, and the reaper takes it back.
struct AioJob {
    file: Arc<FileInner>,
    req: ReadRequest,
}

struct State {
    jobs: VecDeque<Job>,
    /// Threads waiting on `cond`.
    idle: usize,
    /// Threads alive.
    threads: usize,
    /// Threads busy with a primed read (see the module docs).
    primed_busy: usize,
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
        lock_helper(&self.shared.helper.state).shutdown = true;
        self.shared.helper.cond.notify_all();
    }
}

impl fmt::Debug for ThreadPoolEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.handle.shared;
        f.debug_struct("ThreadPoolEngine")
            .field("max_threads", &s.max_threads)
            .field("nowait", &s.nowait.load(Ordering::Relaxed))
            .field("aio", &s.aio_on.load(Ordering::Relaxed))
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
            cached_depth: default_cached_depth(),
            aio: true,
            aio_events: DEFAULT_AIO_EVENTS,
            blocking_inline: false,
            name: "ps-io".into(),
        }
    }

    /// Whether inline `RWF_NOWAIT` attempts are on (they switch off by
    /// themselves if the kernel rejects the flag).
    pub fn nowait(&self) -> bool {
        self.handle.shared.nowait.load(Ordering::Relaxed)
    }

    /// Whether aligned O_DIRECT reads go through native AIO (it switches
    /// off by itself if the kernel has none).
    pub fn aio(&self) -> bool {
        self.handle.shared.aio_on.load(Ordering::Relaxed)
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
            inline_blocking_reads: l(&c.inline_blocking_reads),
            aio_reads: l(&c.aio_reads),
            aio_fallbacks: l(&c.aio_fallbacks),
            aio_unavailable: match self.handle.shared.aio_unavailable.load(Ordering::Relaxed) {
                0 => None,
                e => Some(e),
            },
            threads_started: l(&c.threads_started),
            cached_queued: l(&c.cached_queued),
            helper_reads: l(&c.helper_reads),
            helped_reads: l(&c.helped_reads),
            helper_sleeps: l(&c.helper_sleeps),
            cached_contended: l(&c.cached_contended),
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

/// Runs `f`, and catches a panic out of it (a request's filter or hook):
/// nothing unwinds past this call. The panic's payload is user data whose
/// own drop may panic; it is dropped under a second catch, and what that
/// one catches is forgotten, so the caller's accounting after the call
/// (a thread's busy count, the reaper's loop) always runs.
fn contain_panic(f: impl FnOnce()) {
    if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
        if let Err(again) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
    }
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

/// Collects AIO completions and completes their requests, until the engine
/// is dropped and nothing is in flight.
fn reaper(shared: Arc<Shared>, aio: Arc<Aio>) {
    let mut events = vec![sys::aio::IoEvent::default(); 64];
    loop {
        let n = match aio.ctx.get_events(&mut events, AIO_IDLE_POLL) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(_) => {
                // Cannot happen with a valid context and buffer; do not
                // spin on it, and keep collecting what is in flight.
                std::thread::sleep(AIO_IDLE_POLL);
                0
            }
        };
        for ev in &events[..n] {
            aio.in_flight.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: every event's tag is a pointer from `Box::into_raw` in
            // `start_aio` for a read the kernel accepted; the kernel returns
            // each accepted read's event exactly once, and it has stopped
            // writing the read's frames by then.
            let job = unsafe { Box::from_raw(ev.data as *mut AioJob) };
            let res = ev.res;
            // As on the I/O threads, a panic in a filter or hook drops the
            // request (cancelling it) and the reaper goes on.
            contain_panic(|| aio_done(&shared, *job, res));
        }
        if n == 0 && aio.in_flight.load(Ordering::Acquire) == 0 && lock(&shared.state).shutdown {
            return;
        }
    }
}

/// Finishes an AIO read that returned `res` (bytes, or `-errno`).
fn aio_done(shared: &Arc<Shared>, job: AioJob, res: i64) {
    let AioJob { file, req } = job;
    let r = if res >= 0 {
        Ok(res as usize)
    } else {
        let errno = i32::try_from(-res).unwrap_or(libc::EIO);
        if errno == libc::EAGAIN || errno == libc::EINTR || errno == libc::EOPNOTSUPP {
            // It would have blocked after all, or (EOPNOTSUPP) the device
            // takes no `RWF_NOWAIT` reads, so every AIO read would end so:
            // a thread reads it, and AIO is switched off for the latter.
            if errno == libc::EOPNOTSUPP {
                shared.aio_unavailable(&io::Error::from_raw_os_error(errno));
            }
            shared
                .counters
                .aio_fallbacks
                .fetch_add(1, Ordering::Relaxed);
            shared.submit(Job {
                file,
                req,
                primed: false,
            });
            return;
        }
        Err(io::Error::from_raw_os_error(errno))
    };
    if let Some(rest) = req.complete(r) {
        // A short read's remainder starts inside a block: the threads
        // read it (with a bounce buffer).
        shared.submit(Job {
            file,
            req: rest,
            primed: false,
        });
    }
}

impl Shared {
    /// Switches AIO off for good because of `err`, recorded for
    /// [`EngineStats::aio_unavailable`] (the first such error is kept).
    /// Reads keep going, on the I/O threads.
    fn aio_unavailable(&self, err: &io::Error) {
        let errno = err.raw_os_error().filter(|&e| e != 0).unwrap_or(libc::EIO);
        let _ =
            self.aio_unavailable
                .compare_exchange(0, errno, Ordering::Relaxed, Ordering::Relaxed);
        self.aio_on.store(false, Ordering::Relaxed);
    }

    /// The engine's AIO context, made (with its reaper) on first use.
    /// `None` if it cannot be made: AIO is then switched off (and not
    /// tried again), and the caller reads on the I/O threads.
    fn aio(self: &Arc<Self>) -> Option<Arc<Aio>> {
        let mut g = self.aio.lock().unwrap_or_else(PoisonError::into_inner);
        match &*g {
            AioSlot::Ready(a) => return Some(Arc::clone(a)),
            AioSlot::Failed => return None,
            AioSlot::Untried => {}
        }
        let aio = match sys::aio::Context::new(self.aio_events) {
            Ok(ctx) => Arc::new(Aio {
                ctx,
                in_flight: AtomicUsize::new(0),
            }),
            Err(e) => {
                *g = AioSlot::Failed;
                self.aio_unavailable(&e);
                return None;
            }
        };
        let (shared, reaper_aio) = (Arc::clone(self), Arc::clone(&aio));
        let spawned = std::thread::Builder::new()
            .name(format!("{}-aio", self.name))
            .stack_size(THREAD_STACK)
            .spawn(move || reaper(shared, reaper_aio));
        if let Err(e) = spawned {
            // Nothing could complete AIO reads: do not submit any. (No
            // read is in the context, so dropping it here is safe.)
            *g = AioSlot::Failed;
            self.aio_unavailable(&e);
            return None;
        }
        *g = AioSlot::Ready(Arc::clone(&aio));
        Some(aio)
    }

    /// Submits the O_DIRECT read `req` with AIO. Returns it back when AIO
    /// cannot take it (the caller hands it to the threads).
    fn start_aio(
        self: &Arc<Self>,
        file: &Arc<FileInner>,
        mut req: ReadRequest,
    ) -> Option<ReadRequest> {
        let (a, m) = (file.align as u64, file.mem_align);
        if req.block_size() as u64 % a != 0
            || req.offset() % a != 0
            || req.len_bytes() as u64 % a != 0
        {
            return Some(req); // the threads report it or bounce it
        }
        let iov: Vec<libc::iovec> = req
            .raw_buffers()
            .into_iter()
            .map(|(ptr, len)| libc::iovec {
                iov_base: ptr.cast(),
                iov_len: len,
            })
            .collect();
        if iov.len() > 1024 || iov.iter().any(|v| v.iov_base as usize % m != 0) {
            return Some(req);
        }
        let Some(aio) = self.aio() else {
            // No AIO context: the threads read it (never cancel a read the
            // engine can do).
            self.counters.aio_fallbacks.fetch_add(1, Ordering::Relaxed);
            return Some(req);
        };
        let offset = req.offset();
        let fd = file.fd();
        let job = Box::into_raw(Box::new(AioJob {
            file: Arc::clone(file),
            req,
        }));
        aio.in_flight.fetch_add(1, Ordering::AcqRel);
        // SAFETY: `iov` describes the frames `req` owns (`raw_buffers`: valid
        // and this request's alone until it is completed or dropped). The
        // request now lives in the leaked box `job`, which only the reaper
        // takes back, after the kernel has returned this read's event, so
        // the frames stay owned, valid and untouched while the kernel
        // writes them.
        let r = unsafe {
            aio.ctx
                .submit_preadv(fd, &iov, offset, libc::RWF_NOWAIT, job as u64)
        };
        match r {
            Ok(()) => {
                self.counters.aio_reads.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => {
                aio.in_flight.fetch_sub(1, Ordering::AcqRel);
                // SAFETY: the submission failed, so the kernel never saw
                // `job`: this is its only owner, and it came from
                // `Box::into_raw` above.
                let job = unsafe { Box::from_raw(job) };
                match e.raw_os_error() {
                    // The context is full (or the kernel short of memory
                    // for the moment), or a signal: only this read goes
                    // to the threads. `io_submit` of one iocb cannot be
                    // partial; 0 submitted comes back as EAGAIN.
                    Some(libc::EAGAIN) | Some(libc::EINTR) => {}
                    // No AIO for this kind of file or kernel: stop trying.
                    _ => self.aio_unavailable(&e),
                }
                self.counters.aio_fallbacks.fetch_add(1, Ordering::Relaxed);
                Some(job.req)
            }
        }
    }

    fn submit(self: &Arc<Self>, job: Job) {
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        let primed = job.primed;
        if primed {
            self.counters.queued_primed.fetch_add(1, Ordering::Relaxed);
        }
        let mut st = lock(&self.state);
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
        if !behind_primed && st.jobs.len() > st.idle && st.threads < self.max_threads {
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

/// Tries `req` inline with `preadv2(RWF_NOWAIT)`: completes what the page
/// cache holds and returns what is left for a blocking read, if anything.
/// Records in `file.warm` whether the cache held all of it.
fn read_nowait(shared: &Shared, file: &FileInner, mut req: ReadRequest) -> Option<ReadRequest> {
    let c = &shared.counters;
    let t = Instant::now();
    let r = read_once(file, &mut req, libc::RWF_NOWAIT);
    let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
    c.nowait_nanos.fetch_add(ns, Ordering::Relaxed);
    let full = matches!(r, Ok(n) if n == req.len_bytes());
    if file.warm.load(Ordering::Relaxed) != full {
        file.warm.store(full, Ordering::Relaxed);
    }
    match r {
        Ok(n) if full => {
            c.nowait_full.fetch_add(1, Ordering::Relaxed);
            req.set_served_from_cache(true);
            req.complete(Ok(n))
        }
        // Zero bytes: end of file, or nothing cached at the offset;
        // the blocking read tells which.
        Ok(0) => {
            c.nowait_would_block.fetch_add(1, Ordering::Relaxed);
            Some(req)
        }
        Ok(n) => {
            c.nowait_partial.fetch_add(1, Ordering::Relaxed);
            req.complete(Ok(n))
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
            Some(req)
        }
    }
}

/// Default [`ThreadPoolBuilder::cached_depth`] where there is a second CPU.
pub const DEFAULT_CACHED_DEPTH: usize = 6;

/// How long the helper leaves a lone queued read to the stream that
/// started it before it reads it itself (so that a read whose stream is
/// not polled still completes).
const HELPER_LINGER: Duration = Duration::from_millis(1);

fn default_cached_depth() -> usize {
    match std::thread::available_parallelism() {
        Ok(n) if n.get() > 1 => DEFAULT_CACHED_DEPTH,
        _ => 0,
    }
}

/// The cached-read queue (see the module docs).
struct Helper {
    state: Mutex<HelperState>,
    cond: Condvar,
}

struct HelperState {
    /// Reads the page cache is expected to hold, oldest first.
    jobs: VecDeque<Job>,
    /// Jobs ever pushed (tells the helper whether a lone job is new).
    pushed: u64,
    /// How the helper thread waits on `cond`, if it does.
    sleeping: Sleep,
    /// The helper thread was started.
    started: bool,
    shutdown: bool,
}

/// How the helper thread waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sleep {
    /// It does not.
    No,
    /// For fewer than two jobs to become two, or for its lone job's linger
    /// to end.
    Timed,
    /// For any job: the queue was empty.
    Untimed,
}

fn lock_helper(m: &Mutex<HelperState>) -> MutexGuard<'_, HelperState> {
    // As for `State`: every update is a single push, pop or flag change.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Does a queued cached read: inline `RWF_NOWAIT`, and what the cache did
/// not hold goes to the I/O threads.
fn run_cached(shared: &Arc<Shared>, job: Job) {
    let Job { file, req, primed } = job;
    if let Some(rest) = read_nowait(shared, &file, req) {
        shared.submit(Job {
            file,
            req: rest,
            primed,
        });
    }
}

/// The helper thread: takes the newest queued cached read while at least
/// two are queued (the oldest is the one a stream will want first, and it
/// reads that one itself, see [`IoEngine::help`]); a lone read only once
/// it has waited [`HELPER_LINGER`]. Sleeps otherwise, and never spins.
/// Runs at `SCHED_IDLE`.
fn helper(shared: Arc<Shared>) {
    // Only otherwise idle CPU time: on a machine whose CPUs are all busy
    // the helper would take time from the consumer it is meant to help
    // (a warm scan beside one CPU-bound process went from 0.80x of the read
    // loop to 0.54–0.96x with a normal-priority helper, 0.77–0.85x with
    // this). Where the kernel refuses, it runs at normal priority.
    let _ = sys::set_idle_priority();
    // A thread inherits its creator's CPU affinity, and the helper is
    // created by whichever stream first queues a read: a consumer pinned
    // to one CPU would pin the helper to that same CPU, where it could
    // never run beside it. Use the process's mask instead (errors, such as
    // more CPUs than a `cpu_set_t` holds, leave the inherited one).
    let _ = sys::set_process_affinity();
    let h = &shared.helper;
    let mut st = lock_helper(&h.state);
    // The lone job we left, as `(pushed, deadline)`.
    let mut lone: Option<(u64, Instant)> = None;
    loop {
        let n = st.jobs.len();
        let lone_due = n == 1
            && matches!(lone, Some((p, deadline)) if p == st.pushed && Instant::now() >= deadline);
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
    fn queue_cached(self: &Arc<Self>, job: Job) -> Option<Job> {
        let h = &self.helper;
        let mut st = match h.state.try_lock() {
            Ok(st) => st,
            // As in `lock_helper`: poisoning is moot.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.counters
                    .cached_contended
                    .fetch_add(1, Ordering::Relaxed);
                return Some(job);
            }
        };
        self.counters.cached_queued.fetch_add(1, Ordering::Relaxed);
        st.jobs.push_back(job);
        st.pushed += 1;
        if !st.started {
            let shared = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name(format!("{}-cached", self.name))
                .stack_size(THREAD_STACK)
                .spawn(move || helper(shared));
            if spawned.is_err() {
                // No helper: the read is done here and now, as without one.
                let job = st.jobs.pop_back().expect("the job just queued");
                drop(st);
                run_cached(self, job);
                // Counted as helped, so that `cached_queued` still adds up.
                self.counters.helped_reads.fetch_add(1, Ordering::Relaxed);
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
    fn help(self: &Arc<Self>, file: &FileInner) -> bool {
        let job = {
            let mut st = lock_helper(&self.helper.state);
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
        contain_panic(|| run_cached(self, job));
        self.counters.helped_reads.fetch_add(1, Ordering::Relaxed);
        true
    }
}

impl IoEngine for ThreadPoolEngine {
    type File = ThreadPoolFile;

    fn start_read(&self, file: &ThreadPoolFile, mut req: ReadRequest) {
        let shared = &self.handle.shared;
        let inner = &file.inner;
        if inner.direct && shared.aio_on.load(Ordering::Relaxed) {
            match shared.start_aio(inner, req) {
                None => return,
                Some(r) => req = r,
            }
        }
        let primed = ADVISED.take().is_some_and(|(id, start, end)| {
            id == Arc::as_ptr(inner) as usize
                && start <= req.offset()
                && req.offset() + req.len_bytes() as u64 <= end
        });
        if !inner.direct && shared.nowait.load(Ordering::Relaxed) {
            if shared.cached_depth > 0 && inner.warm.load(Ordering::Relaxed) {
                match shared.queue_cached(Job {
                    file: Arc::clone(inner),
                    req,
                    primed,
                }) {
                    None => return,
                    // The queue was busy: read inline, as without a helper.
                    Some(job) => req = job.req,
                }
            }
            match read_nowait(shared, inner, req) {
                None => return,
                Some(rest) => req = rest,
            }
        }
        let job = Job {
            file: Arc::clone(inner),
            req,
            primed,
        };
        if shared.blocking_inline {
            shared
                .counters
                .inline_blocking_reads
                .fetch_add(1, Ordering::Relaxed);
            run(shared, job);
            return;
        }
        shared.submit(job);
    }

    fn cached_read_depth(&self, file: &ThreadPoolFile) -> usize {
        let shared = &self.handle.shared;
        if file.inner.direct || shared.cached_depth == 0 {
            1
        } else {
            shared.cached_depth
        }
    }

    fn help(&self, file: &ThreadPoolFile) -> bool {
        let shared = &self.handle.shared;
        shared.cached_depth > 0 && shared.help(&file.inner)
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::StreamExt;
    use pagestream::testing::{stamp, StampedFile};
    use pagestream::{source, BufferPool, EngineFile, FileId, ReadFilter, ReadStream};
    use std::io::Read;

    const BS: usize = 8192;

    fn warm(f: &StampedFile) {
        let mut buf = Vec::new();
        std::fs::File::open(f.path())
            .unwrap()
            .read_to_end(&mut buf)
            .unwrap();
    }

    /// An engine whose cached-read helper never starts (it is marked
    /// started): queued reads stay queued until a stream helps.
    fn engine_without_helper() -> ThreadPoolEngine {
        let e = ThreadPoolEngine::builder().cached_depth(6).build();
        lock_helper(&e.handle.shared.helper.state).started = true;
        e
    }

    /// The files of the queued cached reads, oldest first.
    fn queued(e: &ThreadPoolEngine) -> Vec<FileId> {
        let st = lock_helper(&e.handle.shared.helper.state);
        st.jobs.iter().map(|j| j.file.id()).collect()
    }

    fn count(q: &[FileId], id: FileId) -> usize {
        q.iter().filter(|&&i| i == id).count()
    }

    /// Takes pages from `s` (checking them) until one of its reads is queued.
    fn until_queued<E: IoEngine>(
        s: &mut ReadStream<E, source::Forward>,
        engine: &ThreadPoolEngine,
        id: FileId,
        seed: u64,
    ) -> u64 {
        let mut next = 0;
        block_on(async {
            while count(&queued(engine), id) == 0 {
                let page = s.next().await.expect("a page").expect("ok");
                assert!(stamp::check(seed, page.block(), &page));
                next = page.block() + 1;
            }
        });
        next
    }

    fn finish<E: IoEngine>(
        s: &mut ReadStream<E, source::Forward>,
        seed: u64,
        mut next: u64,
        n: u64,
    ) {
        block_on(async {
            while let Some(page) = s.next().await {
                let page = page.expect("page");
                assert_eq!(page.block(), next);
                assert!(stamp::check(seed, next, &page), "block {next}");
                next += 1;
            }
        });
        assert_eq!(next, n);
    }

    #[test]
    fn help_does_only_reads_of_its_own_file() {
        let n = 512;
        let (fa, fb) = (
            StampedFile::with_seed("help-a", 21, n, BS),
            StampedFile::with_seed("help-b", 22, n, BS),
        );
        warm(&fa);
        warm(&fb);
        let engine = engine_without_helper();
        let pool = BufferPool::new(1024, BS).unwrap();
        let a = ThreadPoolFile::open(fa.path()).unwrap();
        let b = ThreadPoolFile::open(fb.path()).unwrap();
        let (ida, idb) = (a.id(), b.id());
        assert_ne!(ida, idb);
        let mut sa = ReadStream::builder(&pool, engine.clone(), a.clone())
            .build(source::forward(0..n))
            .unwrap();
        let mut sb = ReadStream::builder(&pool, engine.clone(), b.clone())
            .build(source::forward(0..n))
            .unwrap();
        let na = until_queued(&mut sa, &engine, ida, 21);
        // Only `a`'s reads are queued: helping `b` does nothing.
        let q = queued(&engine);
        assert!(count(&q, ida) > 0 && count(&q, idb) == 0, "{q:?}");
        assert!(!engine.help(&b));
        assert_eq!(queued(&engine), q);
        // With both queued (`a`'s oldest), helping `b` does `b`'s oldest.
        let nb = until_queued(&mut sb, &engine, idb, 22);
        let q = queued(&engine);
        assert_eq!(q[0], ida, "{q:?}");
        assert!(engine.help(&b));
        let q2 = queued(&engine);
        assert_eq!(count(&q2, ida), count(&q, ida), "{q:?} -> {q2:?}");
        assert_eq!(count(&q2, idb) + 1, count(&q, idb), "{q:?} -> {q2:?}");
        // Another handle of the same file is the same file.
        let a2 = ThreadPoolFile::open(fa.path()).unwrap();
        assert!(engine.help(&a2));
        assert_eq!(count(&queued(&engine), ida) + 1, count(&q, ida));
        finish(&mut sa, 21, na, n);
        finish(&mut sb, 22, nb, n);
        let es = engine.stats();
        assert_eq!(es.helper_reads, 0, "{es:?}");
        assert_eq!(es.cached_queued, es.helped_reads, "{es:?}");
    }

    /// Panics once, in the result filter of a read past block 64.
    struct PanicOnce(AtomicBool);

    impl ReadFilter for PanicOnce {
        fn filter(&self, req: &ReadRequest, r: io::Result<usize>) -> io::Result<usize> {
            if req.first_block() >= 64 && !self.0.swap(true, Ordering::SeqCst) {
                panic!("injected panic in a helped read (expected by the test)");
            }
            r
        }
    }

    #[derive(Clone)]
    struct Panicky(ThreadPoolEngine, Arc<PanicOnce>);

    impl IoEngine for Panicky {
        type File = ThreadPoolFile;
        fn start_read(&self, file: &ThreadPoolFile, mut req: ReadRequest) {
            req.add_filter(Arc::clone(&self.1) as Arc<dyn ReadFilter>);
            self.0.start_read(file, req);
        }
        fn cached_read_depth(&self, file: &ThreadPoolFile) -> usize {
            self.0.cached_read_depth(file)
        }
        fn help(&self, file: &ThreadPoolFile) -> bool {
            self.0.help(file)
        }
        fn name(&self) -> &'static str {
            "panicky"
        }
    }

    #[test]
    fn a_panic_in_a_helped_read_cancels_it_without_unwinding_into_the_stream() {
        let n = 512;
        let f = StampedFile::with_seed("help-panic", 23, n, BS);
        warm(&f);
        // No helper thread: every queued read is done by the stream's help.
        let inner = engine_without_helper();
        let once = Arc::new(PanicOnce(AtomicBool::new(false)));
        let engine = Panicky(inner.clone(), Arc::clone(&once));
        let pool = BufferPool::new(1024, BS).unwrap();
        let file = ThreadPoolFile::open(f.path()).unwrap();
        let mut s = ReadStream::builder(&pool, engine, file)
            .build(source::forward(0..n))
            .unwrap();
        finish(&mut s, 23, 0, n);
        let st = block_on(s.close());
        assert!(once.0.load(Ordering::SeqCst), "no panic injected");
        assert!(st.retries > 0, "cancelled read not retried: {st}");
        let es = inner.stats();
        assert!(es.helped_reads > 0, "{es:?}");
        assert_eq!(es.helper_reads, 0, "{es:?}");
    }

    /// Holds every read it filters on its I/O thread until opened; counts
    /// the reads that reached it.
    #[derive(Default)]
    struct Gate {
        /// `(open, reads that reached the gate)`.
        state: Mutex<(bool, usize)>,
        cond: Condvar,
    }

    impl Gate {
        fn open(&self) {
            self.state.lock().unwrap().0 = true;
            self.cond.notify_all();
        }

        /// Waits (at most 30 s) until `n` reads have reached the gate.
        fn wait_entered(&self, n: usize) {
            let st = self.state.lock().unwrap();
            let (st, _) = self
                .cond
                .wait_timeout_while(st, Duration::from_secs(30), |s| s.1 < n)
                .unwrap();
            assert!(st.1 >= n, "{} of {n} reads reached the gate", st.1);
        }
    }

    impl ReadFilter for Gate {
        fn filter(&self, _req: &ReadRequest, r: io::Result<usize>) -> io::Result<usize> {
            let mut st = self.state.lock().unwrap();
            st.1 += 1;
            self.cond.notify_all();
            while !st.0 {
                st = self.cond.wait(st).unwrap();
            }
            r
        }
    }

    /// Passes reads to the engine it wraps, each held by `gate` if set, and
    /// primed (advised right before it is started, as the planner does) if
    /// `prime`.
    #[derive(Clone)]
    struct Staged {
        inner: ThreadPoolEngine,
        gate: Option<Arc<Gate>>,
        prime: bool,
    }

    impl IoEngine for Staged {
        type File = ThreadPoolFile;
        fn start_read(&self, file: &ThreadPoolFile, mut req: ReadRequest) {
            if let Some(g) = &self.gate {
                req.add_filter(Arc::clone(g) as Arc<dyn ReadFilter>);
            }
            if self.prime {
                self.inner
                    .advise(file, req.offset(), req.len_bytes() as u64);
            }
            self.inner.start_read(file, req);
        }
        fn name(&self) -> &'static str {
            "staged"
        }
    }

    /// An engine whose every read goes to its (at most two) I/O threads.
    fn two_thread_engine() -> ThreadPoolEngine {
        ThreadPoolEngine::builder()
            .threads(2)
            .nowait(false)
            .cached_depth(0)
            .aio(false)
            .build()
    }

    /// Reads block `block` of `f` through `engine` on a thread of its own;
    /// the receiver hears when the page is back and checked.
    fn read_block(
        engine: Staged,
        f: &StampedFile,
        seed: u64,
        block: u64,
    ) -> (std::sync::mpsc::Receiver<()>, std::thread::JoinHandle<()>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = f.path().to_owned();
        let t = std::thread::spawn(move || {
            let pool = BufferPool::new(8, BS).unwrap();
            let file = ThreadPoolFile::open(path).unwrap();
            let mut s = ReadStream::builder(&pool, engine, file)
                .build(source::forward(block..block + 1))
                .unwrap();
            block_on(async {
                let page = s.next().await.expect("a page").expect("ok");
                assert_eq!(page.block(), block);
                assert!(stamp::check(seed, block, &page), "block {block}");
                drop(page);
                assert!(s.next().await.is_none());
            });
            tx.send(()).unwrap();
        });
        (rx, t)
    }

    /// Waits (at most 30 s) until the engine's threads are as `want` says.
    fn wait_threads(e: &ThreadPoolEngine, want: impl Fn(&State) -> bool) {
        for _ in 0..3000 {
            if want(&lock(&e.handle.shared.state)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let st = lock(&e.handle.shared.state);
        panic!(
            "threads: {} alive, {} idle, {} jobs queued",
            st.threads,
            st.idle,
            st.jobs.len()
        );
    }

    const WAIT: Duration = Duration::from_secs(30);

    #[test]
    fn a_primed_read_is_taken_by_an_idle_thread_not_queued_behind_a_blocked_one() {
        let f = StampedFile::with_seed("primed-idle", 31, 4, BS);
        let engine = two_thread_engine();
        let gate = Arc::new(Gate::default());
        let staged = |gate: Option<&Arc<Gate>>, prime| Staged {
            inner: engine.clone(),
            gate: gate.cloned(),
            prime,
        };
        // Thread one is held inside a read.
        let (held, ta) = read_block(staged(Some(&gate), false), &f, 31, 0);
        gate.wait_entered(1);
        // A second read starts thread two, which then idles.
        let (rx, tb) = read_block(staged(None, false), &f, 31, 1);
        rx.recv_timeout(WAIT).expect("the second read completed");
        tb.join().unwrap();
        wait_threads(&engine, |st| st.threads == 2 && st.idle == 1);
        // A primed read now: the idle thread takes it while thread one is
        // still held.
        let (rx, tc) = read_block(staged(None, true), &f, 31, 2);
        let done = rx.recv_timeout(WAIT);
        let es = engine.stats();
        gate.open();
        held.recv_timeout(WAIT).expect("the held read completed");
        ta.join().unwrap();
        tc.join().unwrap();
        assert!(
            done.is_ok(),
            "the primed read waited for the held thread while another idled: {es:?}"
        );
        assert_eq!(es.queued_primed, 1, "{es:?}");
        assert_eq!(es.threads_started, 2, "{es:?}");
    }

    #[test]
    fn a_primed_read_does_not_wait_behind_a_thread_on_an_unprimed_read() {
        let f = StampedFile::with_seed("primed-unprimed", 32, 4, BS);
        let engine = two_thread_engine();
        let gate = Arc::new(Gate::default());
        let held_engine = Staged {
            inner: engine.clone(),
            gate: Some(Arc::clone(&gate)),
            prime: false,
        };
        let (held, ta) = read_block(held_engine, &f, 32, 0);
        gate.wait_entered(1);
        // The only thread is held in a read that is not primed; the pool
        // has room for a second, which takes the primed read.
        let primed = Staged {
            inner: engine.clone(),
            gate: None,
            prime: true,
        };
        let (rx, tc) = read_block(primed, &f, 32, 2);
        let done = rx.recv_timeout(WAIT);
        let es = engine.stats();
        gate.open();
        held.recv_timeout(WAIT).expect("the held read completed");
        ta.join().unwrap();
        tc.join().unwrap();
        assert!(
            done.is_ok(),
            "the primed read waited for a thread held in an unprimed read: {es:?}"
        );
        assert_eq!(es.queued_primed, 1, "{es:?}");
        assert_eq!(es.threads_started, 2, "{es:?}");
    }

    #[test]
    fn a_primed_read_queues_behind_a_thread_on_a_primed_read() {
        // What priming is for: no thread is started for a primed read
        // while the busy thread is on a primed read itself.
        let f = StampedFile::with_seed("primed-primed", 33, 4, BS);
        let engine = two_thread_engine();
        let gate = Arc::new(Gate::default());
        let held_engine = Staged {
            inner: engine.clone(),
            gate: Some(Arc::clone(&gate)),
            prime: true,
        };
        let (held, ta) = read_block(held_engine, &f, 33, 0);
        gate.wait_entered(1);
        let primed = Staged {
            inner: engine.clone(),
            gate: None,
            prime: true,
        };
        let (rx, tc) = read_block(primed, &f, 33, 2);
        // Once the second read is queued, it is still waiting for the one
        // thread.
        wait_threads(&engine, |st| !st.jobs.is_empty());
        let es = engine.stats();
        {
            let st = lock(&engine.handle.shared.state);
            assert_eq!((st.threads, st.jobs.len()), (1, 1), "{es:?}");
        }
        gate.open();
        held.recv_timeout(WAIT).expect("the held read completed");
        rx.recv_timeout(WAIT).expect("the queued read completed");
        ta.join().unwrap();
        tc.join().unwrap();
        let es = engine.stats();
        assert_eq!(es.queued_primed, 2, "{es:?}");
        assert_eq!(es.threads_started, 1, "{es:?}");
    }

    /// Queues cached reads like the engine it wraps, but never helps (the
    /// stream's `help` takes the queue's lock, which the test holds).
    #[derive(Clone)]
    struct NoHelp(ThreadPoolEngine);

    impl IoEngine for NoHelp {
        type File = ThreadPoolFile;
        fn start_read(&self, file: &ThreadPoolFile, req: ReadRequest) {
            self.0.start_read(file, req);
        }
        fn cached_read_depth(&self, file: &ThreadPoolFile) -> usize {
            self.0.cached_read_depth(file)
        }
        fn name(&self) -> &'static str {
            "nohelp"
        }
    }

    #[test]
    fn a_busy_queue_lock_sends_cached_reads_inline() {
        let n = 256;
        let f = StampedFile::with_seed("help-busy", 24, n, BS);
        warm(&f);
        let engine = engine_without_helper();
        // Hold the queue's lock (as a preempted helper might) for the whole
        // scan: every read is done inline instead of waiting for it.
        let guard = lock_helper(&engine.handle.shared.helper.state);
        let (tx, rx) = std::sync::mpsc::channel();
        let (e2, path) = (NoHelp(engine.clone()), f.path().to_owned());
        let scan = std::thread::spawn(move || {
            let pool = BufferPool::new(1024, BS).unwrap();
            let file = ThreadPoolFile::open(path).unwrap();
            let mut s = ReadStream::builder(&pool, e2, file)
                .build(source::forward(0..n))
                .unwrap();
            finish(&mut s, 24, 0, n);
            let st = block_on(s.close());
            tx.send(st).unwrap();
        });
        let st = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the scan waited for the queue's lock");
        drop(guard);
        scan.join().unwrap();
        let es = engine.stats();
        assert_eq!(es.cached_queued, 0, "{es:?}");
        assert!(es.cached_contended > 0, "{es:?}");
        assert_eq!(es.nowait_full, st.reads, "{es:?} {st}");
    }
}
