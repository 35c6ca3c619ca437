//! [`UringTokioEngine`]: the driver's io_uring, used from any tokio runtime.
//!
//! # How reads complete
//!
//! A buffered read is first tried with `preadv2(RWF_NOWAIT)` in
//! `start_read`: what the page cache holds is copied there, on the stream's
//! thread, and never reaches the ring (its completion would wake the reaper
//! on another worker). The rest goes to the ring.
//!
//! One ring per engine, shared by every task and thread that uses the
//! engine (the driver's `sq`/`cq` locks are held only to push or take
//! queue entries). A read is pushed and submitted (`io_uring_enter`) by the
//! stream that starts it, on the stream's own thread. Its completion is
//! taken by whichever comes first:
//!
//! - **the stream itself**: before a stream waits for a read, it asks the
//!   engine for help ([`IoEngine::help`]), which takes the completion
//!   queue's entries (shared memory, no system call) and completes the
//!   reads of the stream's file on the spot (also those another stream's
//!   help left). Reads of other files are kept for the reaper (their hooks
//!   must not run inside this stream's poll), which is woken for them: the
//!   reaper's runtime must be running for those.
//! - **the reaper**: a task spawned on the engine's runtime when the engine
//!   is built, which waits for the ring's descriptor to become readable
//!   through tokio's reactor (`AsyncFd`, `epoll`) and then takes every
//!   completion. It wakes the waiting tasks; a task woken from a worker
//!   runs on that worker next (tokio's LIFO slot), so a completion reaches
//!   a stream spawned on the runtime without another thread in between.
//!   The reaper holds only a weak reference to the ring: it ends when the
//!   last engine handle is dropped.
//!
//! Nothing spins: an idle engine is a task waiting in `epoll`.
//!
//! # Safety of the memory handed to the kernel
//!
//! As in the driver (`src/driver.rs`): every op stays in the driver's table
//! until its completion is taken, and the driver's `Drop` (when the last
//! handle on the ring goes) cancels what is in flight and waits for the
//! kernel before any frame goes back to the pool. None of it depends on
//! the reaper, a runtime or a task: a runtime shut down, a task aborted or
//! a stream dropped with reads in flight leaves the ops in the table, and a
//! leaked engine leaks its ops (and the pool memory they hold) rather than
//! freeing anything the kernel may write.
//!
//! When the engine's runtime shuts down, the reaper is dropped: it then
//! waits (blocking the thread that shuts the runtime down, for as long as
//! the device takes) for every read in flight and completes it, so that a
//! stream on another runtime waiting for one of them is woken. (A buffered
//! read submitted by a worker thread that has exited may end with the
//! kernel's `EFAULT`: its blocks go back empty and are read again by
//! whoever asks for them.) Reads started after that fail with an error
//! saying the runtime is gone, except buffered reads the page cache holds
//! whole, which are copied as before: they need no ring.

use crate::driver::{Config, Driver, EngineStats};
use crate::runtime::{DEFAULT_CQ_ENTRIES, DEFAULT_ENTRIES};
use crate::UringFile;
use pagestream::{EngineHints, IoEngine, ReadRequest};
use std::fmt;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::runtime::Handle;

/// How a [`UringTokioEngine`] sets up its ring and which runtime reaps it.
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// let engine = pagestream_uring::UringTokioEngine::builder()
///     .entries(512)
///     .build()?; // inside a tokio runtime: reaped there
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct UringTokioBuilder {
    cfg: Config,
    handle: Option<Handle>,
}

impl Default for UringTokioBuilder {
    fn default() -> Self {
        UringTokioBuilder {
            cfg: Config {
                entries: DEFAULT_ENTRIES,
                cq_entries: DEFAULT_CQ_ENTRIES,
                submit_batch: 1,
                sqpoll_idle_ms: None,
                coop_taskrun: false,
                defer_taskrun: false,
                nowait: true,
            },
            handle: None,
        }
    }
}

impl UringTokioBuilder {
    /// Submission-queue entries (rounded up to a power of two by the
    /// kernel; default [`DEFAULT_ENTRIES`]). 0 is refused by
    /// [`build`](Self::build).
    pub fn entries(mut self, n: u32) -> Self {
        self.cfg.entries = n;
        self
    }

    /// Completion-queue entries (default [`DEFAULT_CQ_ENTRIES`]; never fewer
    /// than [`entries`](Self::entries)).
    pub fn cq_entries(mut self, n: u32) -> Self {
        self.cfg.cq_entries = n;
        self
    }

    /// A kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`),
    /// sleeping after `idle_ms` without work: starting a read needs no
    /// system call while it is awake, at the price of a busy kernel thread.
    pub fn sqpoll(mut self, idle_ms: u32) -> Self {
        self.cfg.sqpoll_idle_ms = Some(idle_ms);
        self
    }

    /// Copy a buffered read the OS page cache holds on the thread that
    /// starts it (`preadv2(RWF_NOWAIT)`, which never waits for the device),
    /// and send only what it does not hold to the ring (default on).
    /// `O_DIRECT` reads always go to the ring.
    pub fn nowait(mut self, on: bool) -> Self {
        self.cfg.nowait = on;
        self
    }

    /// `IORING_SETUP_COOP_TASKRUN`: completions are not pushed with an
    /// interrupt of the running thread, only at its next system call.
    pub fn coop_taskrun(mut self, on: bool) -> Self {
        self.cfg.coop_taskrun = on;
        self
    }

    /// The tokio runtime whose reactor and worker run the engine's reaper
    /// (default: the runtime [`build`](Self::build) is called in). Streams
    /// may be polled on any runtime or thread, but the reaper's runtime
    /// must be running (driven: a multi-thread runtime always is, a
    /// current-thread runtime only inside its `block_on`) while they wait:
    /// a stream completes only its own file's reads itself, and reads it
    /// finds of other files are left to the reaper.
    pub fn handle(mut self, handle: Handle) -> Self {
        self.handle = Some(handle);
        self
    }

    /// Sets up the ring and spawns its reaper. Fails with
    /// [`io::ErrorKind::InvalidInput`] naming the setting for zero
    /// `entries`, with an error saying so outside a tokio runtime (and
    /// without [`handle`](Self::handle)), and with an error naming the
    /// likely cause where io_uring is unavailable (sysctl
    /// `kernel.io_uring_disabled`, a seccomp filter, an old kernel): fall
    /// back to `pagestream-threadpool` then.
    pub fn build(self) -> io::Result<UringTokioEngine> {
        if self.cfg.entries == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "pagestream-uring: entries must be at least 1, got 0",
            ));
        }
        let handle = match self.handle {
            Some(h) => h,
            None => Handle::try_current().map_err(|_| {
                io::Error::other(
                    "pagestream-uring: UringTokioEngine::build was called outside a tokio \
                     runtime; call it inside one, or give it a runtime with \
                     UringTokioBuilder::handle",
                )
            })?,
        };
        let driver = Driver::new(&self.cfg)?;
        debug_assert_eq!(driver.submit_batch(), 1);
        // The reactor polls a duplicate of the ring's descriptor, owned by
        // the reaper: a descriptor number tokio deregisters is then always
        // the one it registered, whenever the ring itself is closed.
        // SAFETY: the ring's descriptor is open for as long as `driver`,
        // which is alive here.
        let ring_fd = unsafe { BorrowedFd::borrow_raw(driver.ring_fd()) };
        let dup = ring_fd.try_clone_to_owned().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("pagestream-uring: dup of the ring failed: {e}"),
            )
        })?;
        let no_reactor = |cause: String| {
            io::Error::other(format!(
                "pagestream-uring: cannot register the ring with tokio's reactor: {cause} \
                 (build the runtime with enable_io or enable_all)"
            ))
        };
        let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _enter = handle.enter();
            // SAFETY: `RingFd` owns `dup`, which stays open and the same
            // descriptor until the `AsyncFd` is dropped (it is closed by
            // `OwnedFd`'s drop, after the `AsyncFd` deregistered it).
            unsafe { AsyncFd::register_with_interest(RingFd(dup), Interest::READABLE) }
        }));
        // tokio panics, rather than failing, on a runtime without I/O.
        let afd = match registered {
            Ok(Ok(afd)) => afd,
            Ok(Err(e)) => return Err(no_reactor(io::Error::from(e).to_string())),
            Err(p) => {
                let cause = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "it panicked".into());
                drop_panic(p);
                return Err(no_reactor(cause));
            }
        };
        let shared = Arc::new(Shared {
            driver,
            reaper: Mutex::new(None),
            reaper_alive: AtomicBool::new(true),
            pushing: AtomicUsize::new(0),
            reaper_polls: AtomicU64::new(0),
        });
        handle.spawn(Reaper {
            shared: Arc::downgrade(&shared),
            afd,
        });
        Ok(UringTokioEngine { shared })
    }
}

/// The reactor's view of the ring: a duplicate of its descriptor.
struct RingFd(OwnedFd);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The ring and its reaper's state, shared by every handle of one engine.
struct Shared {
    driver: Driver,
    /// The reaper task's waker, to hand it reads deferred by a stream's
    /// help and to tell it the engine is gone.
    reaper: Mutex<Option<Waker>>,
    /// Cleared when the reaper is dropped (its runtime shut down): reads
    /// started after that fail, except buffered ones the page cache holds
    /// whole, which are copied as they start and need no reaper.
    reaper_alive: AtomicBool,
    /// `start_read`s between their look at `reaper_alive` and the end of
    /// their push: the reaper's drop waits for none to be left before it
    /// finishes the reads in flight, so that no read is pushed after it.
    pushing: AtomicUsize,
    /// Times the reaper ran.
    reaper_polls: AtomicU64,
}

impl Shared {
    fn wake_reaper(&self) {
        let waker = self
            .reaper
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Completes every read in flight (and every read deferred by a
    /// stream's help), waiting in the kernel for them (blocking): for when
    /// no reaper is left. Waits are timed, so a completion another thread
    /// takes meanwhile (a stream's help) cannot leave this waiting for
    /// nothing. A panic in a read's hooks is held until every read is done,
    /// then resumed.
    ///
    /// If the kernel keeps refusing to wait (1000 failures in a row other
    /// than `EINTR`, a kernel bug), the reads stay in the driver's table:
    /// their memory is freed only by the driver's drop, after the kernel is
    /// done.
    fn finish_in_flight(&self) {
        let mut panic = None;
        let mut failures = 0;
        loop {
            if let Err(p) =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.driver.reap()))
            {
                match panic {
                    None => panic = Some(p),
                    Some(_) => drop_panic(p),
                }
            }
            if self.driver.pending() == 0 || failures > 1000 {
                break;
            }
            if self.driver.in_flight() == 0 {
                // Only reads a stream's help set aside are left: they are
                // done in the kernel, and the next reap takes them.
                continue;
            }
            match self.driver.wait_for_completion(FINISH_WAIT) {
                Err(e) if e.kind() != io::ErrorKind::Interrupted => failures += 1,
                _ => failures = 0,
            }
        }
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
    }
}

/// The longest [`Shared::finish_in_flight`] waits in the kernel before it
/// looks at the table again.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

impl Drop for Shared {
    fn drop(&mut self) {
        // The reaper ends when it finds the engine gone; the driver's own
        // drop (next) cancels what is in flight and waits for the kernel.
        let waker = self
            .reaper
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The reaper task: takes every completion when the ring's descriptor is
/// readable or a stream deferred reads to it (module docs).
struct Reaper {
    shared: Weak<Shared>,
    afd: AsyncFd<RingFd>,
}

impl Future for Reaper {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(shared) = self.shared.upgrade() else {
            return Poll::Ready(());
        };
        shared.reaper_polls.fetch_add(1, Ordering::Relaxed);
        {
            let mut w = shared.reaper.lock().unwrap_or_else(PoisonError::into_inner);
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        // Clear readiness before taking completions: one posted after the
        // take makes the descriptor readable again and wakes us.
        loop {
            match self.afd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut ready)) => ready.clear_ready(),
                Poll::Ready(Err(_)) => {
                    // The reactor is gone (the runtime is shutting down):
                    // this task is dropped next, and its drop finishes the
                    // reads in flight.
                    return Poll::Pending;
                }
                Poll::Pending => break,
            }
        }
        // An SQE a failed submission left in the queue goes now.
        shared.driver.kick();
        // A hook or waker that panics must not end the reaper (every other
        // read would then wait for a stream's help); the panic hook has
        // reported it, and the driver completed the other reads.
        if let Err(p) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shared.driver.reap()))
        {
            drop_panic(p);
        }
        Poll::Pending
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        // The runtime is shutting down (or the task was aborted). Reads
        // started from now on fail; the ones in flight are finished here,
        // so that whoever waits for them (a stream on another runtime) is
        // woken.
        shared.reaper_alive.store(false, Ordering::SeqCst);
        // A `start_read` that saw the flag set finishes its push (a few
        // queue operations) before this looks at the table.
        while shared.pushing.load(Ordering::SeqCst) > 0 {
            std::thread::yield_now();
        }
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shared.finish_in_flight();
        })) {
            drop_panic(p);
        }
    }
}

/// Drops a panic payload caught in the reaper; a payload whose own drop
/// panics is leaked.
fn drop_panic(p: Box<dyn std::any::Any + Send>) {
    if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(p))) {
        std::mem::forget(again);
    }
}

/// Reads into the pool's frames through an io_uring from any tokio runtime:
/// one `READ` (adjacent frames; a `READ_FIXED` into a
/// [registered pool](Self::register_pool)) or `READV` per request, straight
/// into the frames (an unaligned `O_DIRECT` remainder through a bounce
/// buffer), submitted as the stream starts it, completed by the stream
/// itself or by a reaper task woken through tokio's reactor (see the
/// design notes in `src/tokio.rs`). What the page cache holds of a buffered
/// read is copied in `start_read` instead, on the stream's thread
/// ([`UringTokioBuilder::nowait`]).
///
/// A cheap handle (`Clone`, `Send`, `Sync`): clones share the ring, so one
/// engine serves every task of a program; streams built with it are `Send`
/// and may move between worker threads. Files are [`UringFile`]s, buffered
/// or `O_DIRECT`.
///
/// ```no_run
/// use futures::StreamExt;
/// use pagestream::{source, BufferPool, ReadStream};
/// use pagestream_uring::{UringFile, UringTokioEngine};
///
/// #[tokio::main]
/// async fn main() -> std::io::Result<()> {
///     let engine = UringTokioEngine::new()?; // a clear error without io_uring
///     let pool = BufferPool::new(1024, 8192)?;
///     let file = UringFile::open_direct("table.dat", 8192)?;
///     let scan = tokio::spawn(async move {
///         let mut pages = ReadStream::builder(&pool, engine, file)
///             .build(source::forward(0..1000))?;
///         let mut n = 0u64;
///         while let Some(page) = pages.next().await {
///             n += u64::from(page?[0]);
///         }
///         Ok::<_, std::io::Error>(n)
///     });
///     println!("{}", scan.await??);
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct UringTokioEngine {
    shared: Arc<Shared>,
}

impl fmt::Debug for UringTokioEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringTokioEngine")
            .field("stats", &self.stats())
            .field("in_flight", &self.shared.driver.in_flight())
            .field(
                "reaper_alive",
                &self.shared.reaper_alive.load(Ordering::Relaxed),
            )
            .finish()
    }
}

impl UringTokioEngine {
    /// An engine with [`UringTokioBuilder`]'s defaults, reaped on the
    /// current tokio runtime.
    pub fn new() -> io::Result<UringTokioEngine> {
        UringTokioBuilder::default().build()
    }

    /// Settings for an engine.
    pub fn builder() -> UringTokioBuilder {
        UringTokioBuilder::default()
    }

    /// What this engine did so far (`waits` and `remote_wakes` stay 0: the
    /// engine never waits in the kernel).
    pub fn stats(&self) -> EngineStats {
        let mut st = self.shared.driver.stats();
        st.reaper_polls = self.shared.reaper_polls.load(Ordering::Relaxed);
        st
    }

    /// Reads in flight (submitted, completion not yet taken).
    pub fn in_flight(&self) -> usize {
        self.shared.driver.in_flight()
    }

    /// Registers `pool`'s memory with the ring as fixed buffers (one pool
    /// per engine): reads into it become `READ_FIXED`s. See
    /// [`UringEngine::register_pool`](crate::UringEngine::register_pool).
    pub fn register_pool(&self, pool: &pagestream::BufferPool) -> io::Result<()> {
        self.shared.driver.register_pool(pool)
    }
}

impl IoEngine for UringTokioEngine {
    type File = UringFile;

    fn start_read(&self, file: &UringFile, req: ReadRequest) {
        let shared = &*self.shared;
        // What the page cache holds is copied here, before the push below:
        // it needs no ring and no reaper, and its hooks (which may panic)
        // then run with nothing of the engine's held.
        let Some(req) = shared.driver.read_cached(file, req) else {
            return;
        };
        // Dekker with the reaper's drop (flag, then `pushing`): either this
        // sees the flag cleared, or the drop waits for this push and then
        // finds the read in the table.
        shared.pushing.fetch_add(1, Ordering::SeqCst);
        if shared.reaper_alive.load(Ordering::SeqCst) {
            shared.driver.push(file, req);
            shared.pushing.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        shared.pushing.fetch_sub(1, Ordering::SeqCst);
        let err = io::Error::other(
            "pagestream-uring: the tokio runtime this UringTokioEngine was built on has \
             shut down; build the engine on a runtime that outlives its streams",
        );
        drop(req.complete(Err(err)));
    }

    fn hints(&self, _file: &UringFile) -> EngineHints {
        EngineHints::new().with_help(true)
    }

    fn help(&self, file: &UringFile) -> bool {
        let shared = &*self.shared;
        // An SQE a failed submission left in the queue goes now.
        shared.driver.kick();
        // Without a reaper (its runtime shut down), nobody would complete
        // other files' reads: take them all.
        let only = shared.reaper_alive.load(Ordering::SeqCst).then_some(file);
        shared
            .driver
            .reap_for(only, || shared.wake_reaper())
            .completed
            > 0
    }

    fn name(&self) -> &'static str {
        "uring-tokio"
    }
}
