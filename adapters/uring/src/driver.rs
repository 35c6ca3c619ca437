//! The driver: one io_uring, the reads in flight on it, and the wake-up
//! path for the executor that waits in it.
//!
//! # Why our own driver
//!
//! tokio-uring and glommio both put a scheduler between a read's completion
//! and the next read's submission: tokio-uring learns of completions from
//! `epoll` (the ring's descriptor is registered with tokio's reactor, two
//! `epoll_wait`s a read at depth 1) and completes each read in a task of its
//! own; glommio flushes its submission queue once per scheduler loop and
//! re-arms its preemption timers on every loop, which keeps random reads
//! below fio at some depths (`docs/engines.md`). This driver does what fio
//! does and nothing else:
//!
//! - **Submit as reads start.** [`Driver::push`] builds the read's SQE
//!   ([`ReadOp`]) and, with the default batch of one, hands it to the kernel
//!   at once (`io_uring_enter`), so the device sees each read as soon as the
//!   stream names it, not when the thread next parks. (Before that, the
//!   engines copy what the page cache holds of a buffered read on the spot:
//!   [`Driver::read_cached`].)
//! - **Complete where the reads are waited for.** [`Driver::reap`] takes the
//!   completion queue's entries (shared memory, no system call) and calls
//!   [`ReadRequest::complete`] for each, which publishes the frames and
//!   wakes the waiting tasks; a short read's remainder is pushed again at
//!   once. No task, no channel.
//! - **Wait in the kernel.** When the executor has nothing to poll, it waits
//!   for a completion inside `io_uring_enter` (`submit_and_wait(1)`), which
//!   also submits anything still queued: one system call, no `epoll`.
//!   A waker used from another thread (a stream of another runtime
//!   finishing a read we wait for) writes to an `eventfd` the ring polls,
//!   so that wait ends for cross-thread wake-ups too.
//!
//! # Safety of the memory handed to the kernel
//!
//! Every SQE points into a [`ReadOp`] (see `op.rs`), and every op is kept in
//! [`Driver::ops`] from before its SQE is pushed until its CQE has been
//! reaped; nothing else removes it. When the driver is dropped with reads in
//! flight, it asks the kernel to cancel each and waits for every CQE before
//! dropping the ops (whose requests then return their frames to EMPTY and
//! tell their streams the reads were cancelled). If the kernel keeps
//! refusing that wait (1000 failures in a row with no completion, signals
//! not counted: a kernel bug), the ops are leaked rather than freed under
//! the kernel.
//!
//! None of this depends on user code behaving. Completing or cancelling a
//! read runs its finish hooks and wakes its waiters' wakers, any of which
//! may panic. Wherever the driver does that while other reads are in
//! flight ([`Driver::reap`], `Drop`), each read is completed under
//! `catch_unwind` and the driver carries on (every reaped read completed,
//! and in `Drop` every CQE waited for); only then is the first panic
//! resumed. An unwind never carries the driver out of a loop that still
//! owes the kernel a wait.

use crate::op::{Kind, ReadOp, Registered, FIXED_CHUNK};
use crate::UringFile;
use io_uring::{opcode, squeue, types, IoUring};
use pagestream::{BufferPool, EngineFile, ReadRequest};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Wake;

/// `user_data` of the `eventfd` poll's completions.
const WAKE_TOKEN: u64 = u64::MAX;
/// `user_data` of the cancellations the driver's `Drop` submits.
const CANCEL_TOKEN: u64 = u64::MAX - 1;

/// `io_uring_enter` flags (`linux/io_uring.h`; the io-uring crate does not
/// export them): wait for completions, wake the SQPOLL thread, wait for room
/// in the submission queue.
const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_ENTER_SQ_WAKEUP: u32 = 2;
const IORING_ENTER_SQ_WAIT: u32 = 4;

/// A panic caught while completing a read, resumed once the driver has
/// done what it owes the kernel.
type Panic = Box<dyn std::any::Any + Send + 'static>;

/// Runs `f` (user code: hooks, wakers) and keeps the first panic in
/// `first` instead of unwinding; a later panic's payload is discarded
/// ([`discard`]).
fn catching(first: &mut Option<Panic>, f: impl FnOnce()) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        match first {
            None => *first = Some(p),
            Some(_) => discard(p),
        }
    }
}

/// Drops a panic payload nobody will resume. Its drop is user code and may
/// panic itself (unwinding out of whatever loop holds it, such as the wait
/// for completions in [`Driver`]'s drop): that is caught, and that second
/// payload leaked.
fn discard(p: Panic) {
    if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(p))) {
        std::mem::forget(again);
    }
}

/// The settings a [`Driver`] is built with (see
/// [`UringBuilder`](crate::UringBuilder) for what each means).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) entries: u32,
    pub(crate) cq_entries: u32,
    pub(crate) submit_batch: u32,
    pub(crate) sqpoll_idle_ms: Option<u32>,
    pub(crate) coop_taskrun: bool,
    pub(crate) defer_taskrun: bool,
    /// Try a buffered read with `preadv2(RWF_NOWAIT)` on the starting
    /// thread before it goes to the ring ([`Driver::read_cached`]).
    pub(crate) nowait: bool,
}

/// Locks `m`, ignoring poisoning: no lock of the driver is held while user
/// code runs, so a poisoned lock only means a panic in the driver's own
/// bookkeeping, which leaves the data consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the driver did so far (the engine's statistics).
#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    vectored: AtomicU64,
    fixed: AtomicU64,
    bounced: AtomicU64,
    bytes: AtomicU64,
    submit_calls: AtomicU64,
    waits: AtomicU64,
    remote_wakes: AtomicU64,
    helped: AtomicU64,
    nowait_full: AtomicU64,
    nowait_partial: AtomicU64,
    nowait_would_block: AtomicU64,
}

/// What a [`UringEngine`](crate::UringEngine) (and its runtime) or a
/// [`UringTokioEngine`](crate::UringTokioEngine) did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Reads submitted to io_uring, remainders of short reads included.
    pub reads: u64,
    /// Of those, `READV`s (the request's frames were not adjacent).
    pub vectored: u64,
    /// Of those, `READ_FIXED`s into a registered pool
    /// ([`UringEngine::register_pool`](crate::UringEngine::register_pool)).
    pub fixed: u64,
    /// Of those, reads through a bounce buffer (unaligned `O_DIRECT`).
    pub bounced: u64,
    /// Bytes the kernel reported read, through the ring and by the inline
    /// `RWF_NOWAIT` copies.
    pub bytes: u64,
    /// `io_uring_enter` calls made to submit (not counting waits).
    pub submit_calls: u64,
    /// Times the executor waited in `io_uring_enter` for a completion.
    pub waits: u64,
    /// Wake-ups from other threads that ended such a wait (the `eventfd`).
    pub remote_wakes: u64,
    /// Reads a stream completed itself before waiting
    /// ([`UringTokioEngine`](crate::UringTokioEngine)'s help).
    pub helped: u64,
    /// Times the reaper task ran ([`UringTokioEngine`](crate::UringTokioEngine)).
    pub reaper_polls: u64,
    /// Buffered reads the page cache held whole (up to the end of the file):
    /// copied on the thread that started them (`preadv2(RWF_NOWAIT)`),
    /// never sent to the ring.
    pub nowait_full: u64,
    /// Buffered reads the page cache held the start of: that part copied
    /// the same way, the rest sent to the ring.
    pub nowait_partial: u64,
    /// Buffered reads the page cache held none of (or that would have
    /// blocked, or began at the end of the file), sent to the ring whole.
    pub nowait_would_block: u64,
}

impl EngineStats {
    /// The counters by name, in the shape every engine shares.
    pub fn counters(&self) -> pagestream::EngineCounters {
        pagestream::EngineCounters(vec![
            ("reads", self.reads),
            ("vectored", self.vectored),
            ("fixed", self.fixed),
            ("bounced", self.bounced),
            ("bytes", self.bytes),
            ("submit_calls", self.submit_calls),
            ("waits", self.waits),
            ("remote_wakes", self.remote_wakes),
            ("helped", self.helped),
            ("reaper_polls", self.reaper_polls),
            ("nowait_full", self.nowait_full),
            ("nowait_partial", self.nowait_partial),
            ("nowait_would_block", self.nowait_would_block),
        ])
    }
}

/// What one [`Driver::reap_for`] did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Reaped {
    /// CQEs taken from the completion queue.
    pub(crate) taken: usize,
    /// Reads completed (of the file asked for, and deferred ones).
    pub(crate) completed: usize,
    /// Whether reads of other files were deferred (someone must reap every
    /// file soon).
    pub(crate) deferred: bool,
}

/// Reads in flight, keyed by the SQE's `user_data`: a slab (a `Vec` of
/// slots and a free list), so a key is reused only after its CQE is reaped.
#[derive(Default)]
struct Ops {
    slots: Vec<Option<ReadOp>>,
    free: Vec<usize>,
    len: usize,
}

impl Ops {
    fn insert(&mut self, op: ReadOp) -> usize {
        self.len += 1;
        match self.free.pop() {
            Some(k) => {
                self.slots[k] = Some(op);
                k
            }
            None => {
                self.slots.push(Some(op));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, key: usize) -> Option<ReadOp> {
        let op = self.slots.get_mut(key)?.take()?;
        self.free.push(key);
        self.len -= 1;
        Some(op)
    }
}

/// The executor's wake-up state, shared with every [`Waker`](std::task::Waker)
/// the executor hands out (which may be used from any thread).
pub(crate) struct Signal {
    /// Set by a wake-up; cleared by the executor before it polls.
    woken: AtomicBool,
    /// Set while the executor is (about to be) waiting in the kernel: a
    /// wake-up must then also write to `efd` to end the wait.
    sleeping: AtomicBool,
    /// Nonblocking `eventfd` the ring polls while the executor waits.
    efd: OwnedFd,
}

impl Signal {
    fn new() -> io::Result<Signal> {
        // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("eventfd failed: {e}")));
        }
        Ok(Signal {
            woken: AtomicBool::new(false),
            // SAFETY: `fd` was just returned by eventfd, is open and owned by
            // nothing else.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
            sleeping: AtomicBool::new(false),
        })
    }

    /// Sets the wake-up flag from the executor's own thread (no eventfd).
    pub(crate) fn set_woken(&self) {
        self.woken.store(true, Ordering::SeqCst);
    }

    /// Whether a wake-up is pending (without taking it).
    pub(crate) fn is_woken(&self) -> bool {
        self.woken.load(Ordering::SeqCst)
    }

    /// Takes the wake-up flag (the executor then polls its future).
    pub(crate) fn take_woken(&self) -> bool {
        self.woken.swap(false, Ordering::AcqRel)
    }

    /// Empties the eventfd's counter (after its poll fired).
    fn drain(&self) {
        let mut v = 0u64;
        // SAFETY: `v` is 8 writable bytes, all an eventfd read writes; the
        // descriptor is nonblocking, so this returns at once either way.
        unsafe { libc::read(self.efd.as_raw_fd(), (&raw mut v).cast(), 8) };
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Dekker with `sleep`: either the executor sees `woken` before it
        // waits, or we see `sleeping` and end the wait through the eventfd.
        self.woken.store(true, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            let one = 1u64;
            // SAFETY: writes the 8 bytes of `one`, which is what an eventfd
            // takes; a full counter (EAGAIN) still leaves it readable.
            unsafe { libc::write(self.efd.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }
}

/// One io_uring and the reads in flight on it.
///
/// `Sync`: a [`UringRuntime`](crate::UringRuntime) uses it from its own
/// thread only, a [`UringTokioEngine`](crate::UringTokioEngine) from every
/// thread that starts or helps a read and from its reaper task. The
/// submission queue and the completion queue each have a lock (`sq`, `cq`),
/// taken only around pushing or taking entries, never around user code or
/// a wait; `cq` is taken before `ops`, and `ops` before `deferred`. Waiting
/// in the kernel (`io_uring_enter`) takes no lock. (The one system call
/// under `cq` is the read of the wake-up eventfd, `UringRuntime` only.)
pub(crate) struct Driver {
    ring: IoUring,
    /// Held while an SQE is pushed (`submission_shared`).
    sq: Mutex<()>,
    /// Held while CQEs are taken (`completion_shared`).
    cq: Mutex<()>,
    /// Every read whose SQE was pushed and whose CQE is not yet reaped
    /// (module docs: the safety of the memory handed to the kernel).
    ops: Mutex<Ops>,
    /// Reads whose CQEs a [`reap_for`](Driver::reap_for) limited to one
    /// file took, but which read another file: completed by the next reap
    /// of every file. Their CQEs are in, so the kernel is done with them.
    deferred: Mutex<Vec<(ReadOp, i32)>>,
    /// SQEs pushed since the last submission.
    queued: AtomicU32,
    /// Submit once this many SQEs are queued (and always before waiting).
    submit_batch: u32,
    /// `IORING_SETUP_DEFER_TASKRUN`: completions are posted only inside an
    /// `io_uring_enter` that asks for events.
    defer_taskrun: bool,
    /// Whether the eventfd poll is armed in the ring.
    wake_armed: AtomicBool,
    /// Whether a `block_on` of this driver's runtime is running (reads are
    /// only reaped there; a read started elsewhere would never complete).
    pub(crate) entered: AtomicBool,
    pub(crate) signal: Arc<Signal>,
    /// Reads whose CQEs `reap` took, with their results (kept to reuse the
    /// allocation).
    reaped: Mutex<Vec<(ReadOp, i32)>>,
    /// Whether the kernel takes a multishot poll (5.13+); else the eventfd
    /// poll is one-shot, re-armed before each wait.
    wake_multishot: AtomicBool,
    /// `IORING_SETUP_SQPOLL`: a kernel thread takes the submissions.
    sqpoll: bool,
    /// Buffered reads are tried with `RWF_NOWAIT` first (cleared if the
    /// kernel does not take the flag).
    nowait: AtomicBool,
    counters: Counters,
    /// The pool registered as the ring's fixed buffers, if any
    /// ([`register_pool`](Driver::register_pool)): the handle keeps the
    /// registered memory allocated until `Drop` has unregistered it.
    fixed: OnceLock<(BufferPool, Registered)>,
    /// Held while registering a pool.
    registering: Mutex<()>,
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("in_flight", &self.in_flight())
            .field("submit_batch", &self.submit_batch)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Driver {
    pub(crate) fn new(cfg: &Config) -> io::Result<Driver> {
        let mut b = IoUring::builder();
        b.setup_cqsize(cfg.cq_entries.max(cfg.entries));
        if let Some(idle) = cfg.sqpoll_idle_ms {
            b.setup_sqpoll(idle);
        }
        if cfg.coop_taskrun {
            b.setup_coop_taskrun();
        }
        if cfg.defer_taskrun {
            b.setup_single_issuer().setup_defer_taskrun();
        }
        let ring = b.build(cfg.entries).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "io_uring_setup ({} entries{}) failed: {e} (the kernel refuses these \
                     settings — too many entries, DEFER_TASKRUN with SQPOLL, a flag older \
                     kernels lack — or io_uring is unavailable: disabled by sysctl \
                     kernel.io_uring_disabled, blocked by a seccomp filter, or not in this \
                     kernel; pagestream-threadpool works everywhere)",
                    cfg.entries,
                    if cfg.sqpoll_idle_ms.is_some() {
                        ", SQPOLL"
                    } else {
                        ""
                    }
                ),
            )
        })?;
        Ok(Driver {
            ring,
            sq: Mutex::new(()),
            cq: Mutex::new(()),
            ops: Mutex::new(Ops::default()),
            deferred: Mutex::new(Vec::new()),
            queued: AtomicU32::new(0),
            submit_batch: cfg.submit_batch.max(1),
            defer_taskrun: cfg.defer_taskrun,
            wake_armed: AtomicBool::new(false),
            entered: AtomicBool::new(false),
            signal: Arc::new(Signal::new()?),
            reaped: Mutex::new(Vec::new()),
            wake_multishot: AtomicBool::new(true),
            sqpoll: cfg.sqpoll_idle_ms.is_some(),
            nowait: AtomicBool::new(cfg.nowait),
            counters: Counters::default(),
            fixed: OnceLock::new(),
            registering: Mutex::new(()),
        })
    }

    pub(crate) fn stats(&self) -> EngineStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EngineStats {
            reads: get(&c.reads),
            vectored: get(&c.vectored),
            fixed: get(&c.fixed),
            bounced: get(&c.bounced),
            bytes: get(&c.bytes),
            submit_calls: get(&c.submit_calls),
            waits: get(&c.waits),
            remote_wakes: get(&c.remote_wakes),
            helped: get(&c.helped),
            reaper_polls: 0,
            nowait_full: get(&c.nowait_full),
            nowait_partial: get(&c.nowait_partial),
            nowait_would_block: get(&c.nowait_would_block),
        }
    }

    /// Reads in flight (pushed, CQE not yet reaped).
    pub(crate) fn in_flight(&self) -> usize {
        lock(&self.ops).len
    }

    #[cfg(feature = "tokio")]
    /// The ring's descriptor (for a reactor to poll: it is readable while
    /// completions wait in the queue).
    pub(crate) fn ring_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }

    #[cfg(feature = "tokio")]
    /// Whether submission queue entries are pushed in batches larger than
    /// one (the tokio engine refuses that: nothing would flush a batch).
    pub(crate) fn submit_batch(&self) -> u32 {
        self.submit_batch
    }

    fn bump(c: &AtomicU64, by: u64) {
        c.fetch_add(by, Ordering::Relaxed);
    }

    /// Starts reading `req` from `file`: builds its SQE, keeps its op, and
    /// submits per the batch setting. A read the ring cannot take (its
    /// submission queue stays full) fails with an error saying so.
    pub(crate) fn push(&self, file: &UringFile, req: ReadRequest) {
        let registered = match self.fixed.get() {
            Some((pool, r)) if req.is_in(pool) => Some(*r),
            _ => None,
        };
        // `registered` is this ring's registration, kept until the ring is
        // dropped (`register_pool`).
        let (op, sqe) = ReadOp::with_registered(file, req, registered);
        let c = &self.counters;
        Self::bump(&c.reads, 1);
        match op.kind() {
            Kind::Vectored => Self::bump(&c.vectored, 1),
            Kind::Bounced => Self::bump(&c.bounced, 1),
            Kind::Fixed => Self::bump(&c.fixed, 1),
            _ => {}
        }
        let key = lock(&self.ops).insert(op);
        let sqe = sqe.user_data(key as u64);
        // SAFETY: `sqe` points only into the op just stored under `key` (its
        // request's frames, its iovec array or bounce buffer, its file's
        // descriptor; op.rs invariants 1–3). The op stays in `self.ops` until
        // `reap` has taken this read's CQE (its `user_data` is `key`), or
        // `Drop` has waited for that CQE; nothing else removes it.
        if let Err(e) = unsafe { self.push_sqe(&sqe) } {
            // Never reached the ring: the kernel has no pointer into the op.
            let op = lock(&self.ops).remove(key);
            if let Some(op) = op {
                drop(op.into_request().complete(Err(e)));
            }
            return;
        }
        if self.queued.fetch_add(1, Ordering::AcqRel) + 1 >= self.submit_batch {
            self.submit();
        }
    }

    /// Copies what the page cache holds of a new buffered read on this
    /// thread (`preadv2(RWF_NOWAIT)`, which never waits for the device) and
    /// returns the rest for [`push`](Self::push), or the whole request for
    /// an `O_DIRECT` file, with the attempt turned off, or on a file that
    /// does not take the flag. A cached read sent to the ring would complete
    /// inside `io_uring_enter` all the same, but its completion would then
    /// have to be taken from the ring, and on a tokio runtime it wakes the
    /// reaper on another worker (the ring's descriptor turns readable): a
    /// thread wake-up for every cached read.
    ///
    /// The engines call this before anything else, holding nothing: a
    /// completion runs the read's hooks, which may panic. Remainders of
    /// short ring reads go straight to `push`: they waited for the device,
    /// and a copy of the rest must not mark the read as cached.
    pub(crate) fn read_cached(&self, file: &UringFile, req: ReadRequest) -> Option<ReadRequest> {
        if file.inner.direct
            || !self.nowait.load(Ordering::Relaxed)
            || !file.inner.nowait.load(Ordering::Relaxed)
        {
            return Some(req);
        }
        self.read_nowait(file, req)
    }

    fn read_nowait(&self, file: &UringFile, mut req: ReadRequest) -> Option<ReadRequest> {
        let c = &self.counters;
        let offset = req.offset();
        let len = req.len_bytes();
        let r = {
            let mut bufs = req.buffers_mut();
            let off = libc::off_t::try_from(offset)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"));
            off.and_then(|off| {
                let iovcnt = libc::c_int::try_from(bufs.len()).unwrap_or(libc::c_int::MAX);
                // SAFETY: `bufs` are `iovcnt` (at most their number) valid,
                // writable `IoSliceMut`s, ABI-compatible with `iovec`, into
                // the request's frames, which the request owns for writing
                // until it completes; `preadv2` writes only inside them and
                // keeps no pointer after it returns.
                let n = unsafe {
                    libc::preadv2(
                        file.inner.fd(),
                        bufs.as_mut_ptr().cast::<libc::iovec>(),
                        iovcnt,
                        off,
                        libc::RWF_NOWAIT,
                    )
                };
                usize::try_from(n).map_err(|_| io::Error::last_os_error())
            })
        };
        match r {
            Ok(n) if n == len => {
                Self::bump(&c.nowait_full, 1);
                Self::bump(&c.bytes, n as u64);
                req.set_served_from_cache(true);
                req.complete(Ok(n))
            }
            // The end of the file (nothing cached is `EAGAIN`): the ring's
            // read reports it as the stream expects.
            Ok(0) => {
                Self::bump(&c.nowait_would_block, 1);
                Some(req)
            }
            Ok(n) => {
                Self::bump(&c.bytes, n as u64);
                // Cached, unless a remainder is left for the ring: without
                // one, the read ended at the file's short last page and
                // never waited for the device.
                req.set_served_from_cache(true);
                match req.complete(Ok(n)) {
                    Some(mut rest) => {
                        rest.set_served_from_cache(false);
                        Self::bump(&c.nowait_partial, 1);
                        Some(rest)
                    }
                    None => {
                        Self::bump(&c.nowait_full, 1);
                        None
                    }
                }
            }
            Err(e) => {
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => Self::bump(&c.nowait_would_block, 1),
                    // A kernel or file system that does not take the flag
                    // for this file (FUSE, NFS, older tmpfs): stop trying it
                    // on this file.
                    Some(libc::EOPNOTSUPP) => file.inner.nowait.store(false, Ordering::Relaxed),
                    // A kernel without `preadv2`: stop trying altogether.
                    Some(libc::ENOSYS) => self.nowait.store(false, Ordering::Relaxed),
                    // Anything else: the ring's read reports it.
                    _ => {}
                }
                Some(req)
            }
        }
    }

    /// Registers `pool`'s memory as the ring's fixed buffers
    /// (`IORING_REGISTER_BUFFERS`), so that reads into its adjacent frames
    /// are `READ_FIXED`s. The kernel pins the memory (it counts against
    /// `RLIMIT_MEMLOCK` without `CAP_IPC_LOCK`), and the driver keeps a
    /// handle on the pool as long as the ring lives. One pool per ring:
    /// registering the same pool again does nothing, another pool fails.
    pub(crate) fn register_pool(&self, pool: &BufferPool) -> io::Result<()> {
        let _registering = lock(&self.registering);
        if let Some((registered, _)) = self.fixed.get() {
            if registered.same_pool(pool) {
                return Ok(());
            }
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "pagestream-uring: this ring already has another pool registered (one pool per \
                 ring); reads into other pools are not fixed-buffer reads",
            ));
        }
        let (base, len) = pool.memory();
        let iovecs: Vec<libc::iovec> = (0..len)
            .step_by(FIXED_CHUNK)
            .map(|off| libc::iovec {
                // SAFETY: `off < len`: within (or one past) the allocation.
                iov_base: unsafe { base.add(off) }.cast(),
                iov_len: (len - off).min(FIXED_CHUNK),
            })
            .collect();
        // SAFETY: the buffers are the pool's memory, which stays allocated
        // while `self.fixed` holds a handle on the pool: until `Drop` has
        // waited for every read and unregistered them. The kernel writes
        // into them only for `READ_FIXED` SQEs, which `push` builds only for
        // requests into this pool's frames (`ReadOp::with_registered`), and
        // only within those frames.
        unsafe { self.ring.submitter().register_buffers(&iovecs) }.map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::ENOMEM) {
                " (the kernel pins registered memory: raise RLIMIT_MEMLOCK, `ulimit -l`, or \
                 run with CAP_IPC_LOCK)"
            } else {
                ""
            };
            io::Error::new(
                e.kind(),
                format!(
                    "pagestream-uring: registering the pool's {} MiB as io_uring fixed buffers \
                     failed: {e}{hint}; reads work without it",
                    len >> 20
                ),
            )
        })?;
        let registered = Registered {
            base: base as usize,
            len,
        };
        // Under `registering`, and `fixed` was empty: the set succeeds.
        let _ = self.fixed.set((pool.clone(), registered));
        Ok(())
    }

    /// Pushes `sqe`, submitting the queue first if it is full.
    ///
    /// # Safety
    ///
    /// Whatever `sqe` points to must stay valid until its CQE is reaped.
    unsafe fn push_sqe(&self, sqe: &squeue::Entry) -> io::Result<()> {
        for _ in 0..3 {
            // SAFETY: the caller keeps the SQE's memory valid until its CQE.
            if self.with_sq(|sq| unsafe { sq.push(sqe) }).is_ok() {
                return Ok(());
            }
            if self.sqpoll {
                // The kernel thread takes entries on its own, but only while
                // it is awake: after its idle time it sleeps until woken
                // (IORING_SQ_NEED_WAKEUP), and waiting for room alone
                // (SQ_WAIT) would then wait forever. The queued entries are
                // already visible to it (the push published the tail), so
                // waking it is the flush; wake and wait in one call. The
                // wake is unconditional: it does nothing to a thread that is
                // awake, and reading NEED_WAKEUP first would race with the
                // thread going to sleep.
                Self::bump(&self.counters.submit_calls, 1);
                // SAFETY: no SQEs are submitted by this call (to_submit 0;
                // the SQPOLL thread takes them) and no argument pointer is
                // passed; the flags only wake the SQ thread and wait for
                // room in the submission queue.
                let r = unsafe {
                    self.ring.submitter().enter::<libc::sigset_t>(
                        0,
                        0,
                        IORING_ENTER_SQ_WAKEUP | IORING_ENTER_SQ_WAIT,
                        None,
                    )
                };
                if r.is_ok() {
                    self.queued.store(0, Ordering::Release);
                }
                continue;
            }
            self.submit();
        }
        Err(io::Error::other(
            "pagestream-uring: the io_uring submission queue stays full \
             (the kernel is not taking submissions); read not started",
        ))
    }

    /// Hands the queued SQEs to the kernel. Errors are transient here
    /// (`EBUSY` while completions overflow, `EINTR`): the SQEs stay queued
    /// and go with the next submission or wait.
    pub(crate) fn submit(&self) {
        if self.queued.load(Ordering::Acquire) == 0 && self.sq_is_empty() {
            return;
        }
        Self::bump(&self.counters.submit_calls, 1);
        self.sqpoll_fence();
        if self.ring.submit().is_ok() {
            self.queued.store(0, Ordering::Release);
        }
    }

    /// Submits SQEs a failed submission left queued (`EAGAIN`, `EBUSY`):
    /// nothing when none is (no lock, no system call), so that it can run on
    /// every help. A failed submission leaves `queued` above zero, and a
    /// later successful one (which clears it) takes every queued SQE.
    #[cfg(feature = "tokio")]
    pub(crate) fn kick(&self) {
        if self.queued.load(Ordering::Acquire) > 0 {
            self.submit();
        }
    }

    /// Whether no SQE waits in the submission queue for the kernel.
    fn sq_is_empty(&self) -> bool {
        self.with_sq(|sq| sq.is_empty())
    }

    /// Runs `f` on the submission queue, under the `sq` lock.
    ///
    /// The queue handle must be dropped *before* the lock is released: its
    /// drop stores its copy of the queue's tail into the ring. A handle
    /// dropped after the lock (a temporary in a block's tail expression)
    /// could store a stale tail over another thread's push, and that read
    /// would never reach the kernel.
    fn with_sq<R>(&self, f: impl FnOnce(&mut squeue::SubmissionQueue<'_>) -> R) -> R {
        let guard = lock(&self.sq);
        // SAFETY: `submission_shared` needs no other submission queue handle
        // to be in use at the same time: every handle is made here, under
        // the `sq` lock, and dropped before it is released (`Drop`, with
        // `&mut self`, makes none).
        let mut sq = unsafe { self.ring.submission_shared() };
        let r = f(&mut sq);
        drop(sq);
        drop(guard);
        r
    }

    /// With SQPOLL, orders the publication of the submission queue's tail
    /// before the read of the ring's flags that decides whether the SQ
    /// thread must be woken (the io-uring crate reads them with no fence).
    /// Without it the two could pass each other: the thread, finding the
    /// queue empty, goes to sleep while we, finding no NEED_WAKEUP, do not
    /// wake it, and a wait for completions never ends.
    fn sqpoll_fence(&self) {
        if self.sqpoll {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }

    /// Completes every read whose CQE is in, without a system call, and
    /// pushes their remainders. Returns how many CQEs it took.
    pub(crate) fn reap(&self) -> usize {
        self.reap_for(None, || {}).taken
    }

    /// Completes the reads whose CQEs are in (of `only`'s file if given;
    /// also those deferred by earlier reaps if not), without a system call,
    /// and pushes their remainders. `on_deferred` is called, before any read
    /// is completed, if reads of other files were deferred (someone must
    /// reap every file soon).
    ///
    /// Two phases: first every CQE is taken and each read's op moved out of
    /// the table, then the reads are completed with no lock held. A read
    /// whose CQE is gone thus never stays in the table (nothing would ever
    /// finish it, and `Drop` would wait for it forever). A read of another
    /// file than `only` is kept in `deferred` (its CQE is in: the kernel is
    /// done with it) for a reap of every file. A panic while completing one
    /// (a hook, a filter, a waker) is caught; the other reads are completed
    /// (and their remainders pushed) all the same, and the first panic is
    /// resumed at the end. Reads still in flight stay in the table either
    /// way.
    pub(crate) fn reap_for(&self, only: Option<&UringFile>, on_deferred: impl FnOnce()) -> Reaped {
        let mut done = std::mem::take(&mut *lock(&self.reaped));
        let mut out = Reaped::default();
        {
            let mut deferred = lock(&self.deferred);
            match only {
                None => done.append(&mut deferred),
                Some(f) => {
                    // This file's reads deferred by another file's reap.
                    let mut i = 0;
                    while i < deferred.len() {
                        if deferred[i].0.file().id() == f.id() {
                            done.push(deferred.swap_remove(i));
                        } else {
                            i += 1;
                        }
                    }
                }
            }
        }
        // Completions the kernel could not post (the queue was full) wait
        // on its overflow list until an `io_uring_enter` asks for events;
        // nothing else here would ever ask (the tokio engine never waits in
        // the kernel). Flushed, they are taken in the next round.
        for _ in 0..4 {
            self.take_completions(only, &mut done, &mut out);
            if !self.flush_overflow() {
                break;
            }
        }
        if out.deferred {
            on_deferred();
        }
        out.completed = done.len();
        if only.is_some() {
            Self::bump(&self.counters.helped, out.completed as u64);
        }
        let mut panic = None;
        for (op, res) in done.drain(..) {
            // No lock of the driver is held here: completing wakes tasks
            // and runs hooks (and a failed push of a remainder completes
            // it with the error).
            catching(&mut panic, || {
                let file = op.file().clone();
                let (result, req) = op.finish(res);
                if let Ok(b) = &result {
                    Self::bump(&self.counters.bytes, *b as u64);
                }
                if let Some(rest) = req.complete(result) {
                    self.push(&file, rest);
                }
            });
        }
        *lock(&self.reaped) = done;
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        out
    }

    /// Phase one of [`reap_for`](Self::reap_for): takes every CQE, moving
    /// each read's op out of the table into `done` (or, for another file
    /// than `only`, into `deferred`).
    fn take_completions(
        &self,
        only: Option<&UringFile>,
        done: &mut Vec<(ReadOp, i32)>,
        out: &mut Reaped,
    ) {
        let _cq = lock(&self.cq);
        let mut ops = lock(&self.ops);
        let mut deferred = None;
        // SAFETY: `completion_shared` needs no other completion queue
        // handle to be in use at the same time: every reap holds the `cq`
        // lock (`Drop`, with `&mut self`, holds no other).
        for cqe in unsafe { self.ring.completion_shared() } {
            out.taken += 1;
            match cqe.user_data() {
                WAKE_TOKEN => self.wake_cqe(cqe.result(), cqe.flags()),
                CANCEL_TOKEN => {}
                key => {
                    // The CQE is in: the kernel is done with the op's memory.
                    let Some(op) = ops.remove(key as usize) else {
                        continue;
                    };
                    match only {
                        Some(f) if op.file().id() != f.id() => deferred
                            .get_or_insert_with(|| lock(&self.deferred))
                            .push((op, cqe.result())),
                        _ => done.push((op, cqe.result())),
                    }
                }
            }
        }
        out.deferred |= deferred.is_some();
    }

    /// If completions wait on the kernel's overflow list, has the kernel
    /// post them (an `io_uring_enter` asking for events, not waiting).
    /// Returns whether it did.
    fn flush_overflow(&self) -> bool {
        let overflow = self.with_sq(|sq| sq.cq_overflow());
        if !overflow {
            return false;
        }
        // SAFETY: no SQEs are submitted (to_submit 0) and no argument
        // pointer is passed; GETEVENTS with min_complete 0 only flushes the
        // overflow list (and runs pending task work) and returns.
        let _ = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None)
        };
        true
    }

    #[cfg(feature = "tokio")]
    /// Reads in flight plus reads deferred by a reap of one file: what must
    /// still be completed.
    pub(crate) fn pending(&self) -> usize {
        self.in_flight() + lock(&self.deferred).len()
    }

    /// The eventfd poll fired (`res` > 0), failed, or ended.
    fn wake_cqe(&self, res: i32, flags: u32) {
        if res >= 0 {
            self.signal.drain();
            Self::bump(&self.counters.remote_wakes, 1);
        } else if res == -libc::EINVAL && self.wake_multishot.load(Ordering::Relaxed) {
            // A kernel before 5.13: no multishot poll; use one-shot polls.
            self.wake_multishot.store(false, Ordering::Relaxed);
        }
        if res < 0 || !io_uring::cqueue::more(flags) {
            self.wake_armed.store(false, Ordering::Relaxed);
        }
    }

    /// Waits in the kernel until at least one CQE is in (a read's, or the
    /// eventfd poll's for a wake-up from another thread), submitting
    /// anything queued on the way. Returns at once if a CQE is already in.
    pub(crate) fn wait(&self) {
        if !self.wake_armed.load(Ordering::Relaxed) {
            let poll =
                opcode::PollAdd::new(types::Fd(self.signal.efd.as_raw_fd()), libc::POLLIN as u32)
                    .multi(self.wake_multishot.load(Ordering::Relaxed))
                    .build()
                    .user_data(WAKE_TOKEN);
            // SAFETY: a poll SQE points to no memory; its descriptor is the
            // signal's eventfd, which lives as long as the driver (and the
            // ring is dropped first, with the driver's fields in order).
            if unsafe { self.push_sqe(&poll) }.is_ok() {
                self.wake_armed.store(true, Ordering::Relaxed);
            }
        }
        if !self.wake_armed.load(Ordering::Relaxed) && self.in_flight() == 0 {
            // No read will end the wait and a wake-up from another thread
            // could not reach the ring: do not block in the kernel.
            self.submit();
            std::thread::sleep(std::time::Duration::from_millis(1));
            return;
        }
        Self::bump(&self.counters.waits, 1);
        self.sqpoll_fence();
        // EINTR, or EBUSY while completions overflow: the caller reaps and
        // comes back.
        if self.ring.submit_and_wait(1).is_ok() {
            self.queued.store(0, Ordering::Release);
        }
    }

    #[cfg(feature = "tokio")]
    /// Waits in the kernel until a CQE is in or `timeout` has passed, with
    /// no eventfd poll armed. The timeout matters: another thread may take
    /// the completion waited for (a stream's help) between the caller's
    /// look at the table and this wait. A timeout is `Ok`; so is a kernel
    /// without timed waits (5.11+), after a 1 ms sleep. Other errors
    /// (`EINTR`, `EBUSY`) are returned.
    pub(crate) fn wait_for_completion(&self, timeout: std::time::Duration) -> io::Result<()> {
        self.sqpoll_fence();
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                std::thread::sleep(std::time::Duration::from_millis(1));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// With deferred task running, has the kernel post the completions it
    /// holds (an `io_uring_enter` asking for events, not waiting), so that
    /// [`reap`](Self::reap) sees them. Otherwise nothing: completions are
    /// posted as they happen.
    pub(crate) fn run_deferred(&self) {
        if !self.defer_taskrun || self.in_flight() == 0 {
            return;
        }
        // SAFETY: no SQEs are submitted (to_submit 0) and no argument
        // pointer is passed; GETEVENTS with min_complete 0 only runs the
        // ring's pending task work and returns.
        let _ = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None)
        };
    }

    /// Waits until no read is in flight, completing each.
    pub(crate) fn drain(&self) {
        while self.in_flight() > 0 {
            if self.reap() == 0 {
                self.wait();
            }
        }
    }

    /// Marks the executor as about to wait (see [`Signal`]); returns false
    /// if a wake-up came in the meantime (do not wait then).
    pub(crate) fn prepare_sleep(&self) -> bool {
        self.signal.sleeping.store(true, Ordering::SeqCst);
        if self.signal.woken.load(Ordering::SeqCst) {
            self.signal.sleeping.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    pub(crate) fn end_sleep(&self) {
        self.signal.sleeping.store(false, Ordering::SeqCst);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Reads deferred by a reap of one file are done (their CQEs are in):
        // dropping them cancels their requests. A panic there (user code) is
        // held like the others below.
        let mut panic = None;
        let deferred = std::mem::take(
            self.deferred
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for entry in deferred {
            catching(&mut panic, || drop(entry));
        }
        let keys: Vec<u64> = {
            let ops = self.ops.get_mut().unwrap_or_else(PoisonError::into_inner);
            (0..ops.slots.len())
                .filter(|&k| ops.slots[k].is_some())
                .map(|k| k as u64)
                .collect()
        };
        for key in keys {
            let cancel = opcode::AsyncCancel::new(key)
                .build()
                .user_data(CANCEL_TOKEN);
            // SAFETY: a cancellation points to no memory. (A full queue is
            // waited on as for reads, the SQPOLL thread woken.)
            let _ = unsafe { self.push_sqe(&cancel) };
        }
        // Every op stays until its CQE is in (not through `reap`, which
        // would complete the reads and push remainders). Dropping an op runs
        // user code (its hooks, its waiters' wakers); a panic there is held
        // until every CQE is in, so that no unwind leaves this loop with
        // reads the kernel may still write into (the field drop glue would
        // then close the ring and free the rest of them).
        // Failed waits in a row (EINTR does not count: a signal handler may
        // interrupt us any number of times while reads are slow).
        let mut failures = 0;
        let ops = self.ops.get_mut().unwrap_or_else(PoisonError::into_inner);
        while ops.len > 0 {
            if self.sqpoll {
                std::sync::atomic::fence(Ordering::SeqCst);
            }
            let r = self.ring.submit_and_wait(1);
            let done: Vec<u64> = self.ring.completion().map(|c| c.user_data()).collect();
            if !done.is_empty() {
                failures = 0;
            }
            for key in done {
                if key != WAKE_TOKEN && key != CANCEL_TOKEN {
                    // The kernel is done with this op: dropping it drops the
                    // request unfinished, which returns its frames to EMPTY
                    // and tells its stream the read was cancelled.
                    let op = ops.remove(key as usize);
                    catching(&mut panic, || drop(op));
                }
            }
            match r {
                Err(e) if e.kind() != io::ErrorKind::Interrupted => {
                    failures += 1;
                    if failures > 1000 {
                        // The kernel keeps refusing to wait (a kernel bug):
                        // leak the reads (frames stay "being read") rather
                        // than free memory it may still write.
                        std::mem::forget(std::mem::take(ops));
                        break;
                    }
                }
                _ => {}
            }
        }
        // The registered pool's memory may be freed with `self.fixed` below,
        // while the ring itself may stay open a little longer (a reactor's
        // duplicate of its descriptor): unregister it first. (No SQE can be
        // submitted any more, so nothing is written into it either way.)
        if self.fixed.get().is_some() {
            let _ = self.ring.submitter().unregister_buffers();
        }
        // The kernel holds no pointer into anything of ours any more: the
        // first panic may go on (unless this drop runs during an unwind,
        // where a second panic would abort the process; the panic hook has
        // already reported it).
        if let Some(p) = panic {
            if std::thread::panicking() {
                discard(p);
            } else {
                std::panic::resume_unwind(p);
            }
        }
    }
}
