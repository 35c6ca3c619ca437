//! [`UringRuntime`] (a one-future executor that waits in its ring),
//! [`UringBuilder`] and [`UringEngine`].

use crate::driver::{Config, Driver, EngineStats};
use crate::UringFile;
use pagestream::{IoEngine, ReadRequest};
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Submission-queue entries by default: more than any stream keeps in
/// flight between two submissions (with a batch of one, a read is submitted
/// as it is pushed; the queue only fills if the kernel refuses submissions).
pub const DEFAULT_ENTRIES: u32 = 256;

/// Completion-queue entries by default: room for the reads of many streams
/// in flight at once without the kernel's overflow list.
pub const DEFAULT_CQ_ENTRIES: u32 = 4096;

/// How a [`UringRuntime`] sets up its ring and when it submits.
///
/// ```no_run
/// let rt = pagestream_uring::UringRuntime::builder()
///     .entries(64)
///     .submit_batch(1) // each read to the kernel as it is started (default)
///     .build()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct UringBuilder {
    cfg: Config,
}

impl Default for UringBuilder {
    fn default() -> Self {
        UringBuilder {
            cfg: Config {
                entries: DEFAULT_ENTRIES,
                cq_entries: DEFAULT_CQ_ENTRIES,
                submit_batch: 1,
                sqpoll_idle_ms: None,
                coop_taskrun: false,
                defer_taskrun: false,
                nowait: true,
            },
        }
    }
}

impl UringBuilder {
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

    /// Submit once `n` reads are queued, and always before waiting (default
    /// 1: every read goes to the kernel as the stream starts it, as fio
    /// does). Larger batches save system calls and make the device see
    /// reads in bursts. 0 is refused by [`build`](Self::build).
    pub fn submit_batch(mut self, n: u32) -> Self {
        self.cfg.submit_batch = n;
        self
    }

    /// A kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`),
    /// sleeping after `idle_ms` without work: submissions need no system
    /// call while it is awake, at the price of a busy kernel thread.
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

    /// `IORING_SETUP_DEFER_TASKRUN` (with `SINGLE_ISSUER`): the kernel
    /// finishes completions only when the runtime waits for them, never by
    /// interrupting the thread (kernel 6.1 or later).
    pub fn defer_taskrun(mut self, on: bool) -> Self {
        self.cfg.defer_taskrun = on;
        self
    }

    /// Sets up the ring. Fails with [`io::ErrorKind::InvalidInput`] naming
    /// the setting for zero `entries` or `submit_batch`, and with an error
    /// naming the likely cause where io_uring is unavailable.
    pub fn build(self) -> io::Result<UringRuntime> {
        for (name, v) in [
            ("entries", self.cfg.entries),
            ("submit_batch", self.cfg.submit_batch),
        ] {
            if v == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("pagestream-uring: {name} must be at least 1, got 0"),
                ));
            }
        }
        Ok(UringRuntime {
            driver: Rc::new(Driver::new(&self.cfg)?),
        })
    }
}

/// A minimal executor with its own io_uring: [`block_on`](Self::block_on)
/// runs one future on the calling thread, and when the future waits, the
/// thread waits for a completion inside `io_uring_enter` (see the driver's
/// docs in `src/driver.rs`). Streams built with its
/// [`engine`](Self::engine) must be polled inside its `block_on`.
///
/// `!Send`: a runtime, its engine handles and the streams using them stay
/// on the thread that made the runtime (make one runtime per thread; a
/// [`BufferPool`](pagestream::BufferPool) may be shared between them).
/// Wakers it hands out are thread-safe: a stream waiting for a block that a
/// stream on another thread is reading is woken from there.
///
/// The future may await anything that wakes through its waker (pagestream
/// streams, channels, other threads' work), but no I/O of another runtime's
/// reactor (tokio sockets, timers): nothing here drives those.
///
/// ```no_run
/// use futures::StreamExt;
/// use pagestream::{source, BufferPool, ReadStream};
/// use pagestream_uring::{UringFile, UringRuntime};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = UringRuntime::new()?; // fails clearly without io_uring
/// let file = UringFile::open_direct("table.dat", 8192)?;
/// let pool = BufferPool::new(1024, 8192)?;
/// let pages = rt.block_on(async {
///     let mut pages = ReadStream::builder(&pool, rt.engine(), file)
///         .max_ios(16)
///         .build(source::forward(0..1000))?;
///     let mut n = 0;
///     while let Some(page) = pages.next().await {
///         page?;
///         n += 1;
///     }
///     Ok::<_, std::io::Error>(n)
/// })?;
/// # Ok(())
/// # }
/// ```
pub struct UringRuntime {
    driver: Rc<Driver>,
}

impl fmt::Debug for UringRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringRuntime")
            .field("driver", &self.driver)
            .finish()
    }
}

/// Clears the runtime's "inside `block_on`" mark however `block_on` ends.
struct Entered<'a>(&'a Driver);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.entered.store(false, Ordering::Release);
    }
}

impl UringRuntime {
    /// A runtime with [`UringBuilder`]'s defaults.
    pub fn new() -> io::Result<UringRuntime> {
        UringBuilder::default().build()
    }

    /// Settings for a runtime.
    pub fn builder() -> UringBuilder {
        UringBuilder::default()
    }

    /// An engine that reads through this runtime's ring (a cheap handle;
    /// clones share the ring and counters).
    pub fn engine(&self) -> UringEngine {
        UringEngine {
            driver: Rc::clone(&self.driver),
        }
    }

    /// What the runtime's engines did so far.
    pub fn stats(&self) -> EngineStats {
        self.driver.stats()
    }

    /// Runs `fut` to completion on this thread. Reads its streams start are
    /// submitted and completed here; while `fut` waits, the thread waits for
    /// a completion (or a wake-up from another thread) in the kernel. Before
    /// returning it waits for the reads still in flight (a stream dropped
    /// with reads ahead), so that every read ends, and wakes whoever else
    /// waits for its blocks, without this runtime being entered again.
    ///
    /// # Panics
    ///
    /// If called from inside this runtime's own `block_on` (the outer call
    /// would never run again). A panic in `fut` propagates; reads it left in
    /// flight are completed by later `block_on` calls, or cancelled (their
    /// frames returned to empty) when the last handle on the runtime goes.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        let d = &*self.driver;
        assert!(
            !d.entered.load(Ordering::Acquire),
            "pagestream-uring: block_on called inside the same runtime's block_on"
        );
        d.entered.store(true, Ordering::Release);
        let _entered = Entered(d);
        let waker = Waker::from(Arc::clone(&d.signal));
        let mut cx = Context::from_waker(&waker);
        let mut fut = pin!(fut);
        // A fresh future is polled first, whatever earlier calls left.
        d.signal.set_woken();
        loop {
            if d.signal.take_woken() {
                if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
                    d.drain();
                    return out;
                }
            }
            // Complete what the kernel has finished (no system call) after
            // every poll, which wakes the future if it waited for it: a
            // future that wakes itself (a yield) must not starve its reads.
            if d.reap() > 0 {
                continue;
            }
            if d.signal.is_woken() {
                // Woken, no completion in: hand queued reads to the kernel
                // (with a submission batch above one they would otherwise
                // wait for a `wait` that a self-waking future never
                // reaches), and with deferred task running ask the kernel to
                // post completions (without waiting) before polling again.
                d.submit();
                d.run_deferred();
                continue;
            }
            // Nothing to do: wait in the kernel, unless a wake-up from
            // another thread slipped in.
            if d.prepare_sleep() {
                d.wait();
                d.end_sleep();
            }
        }
    }
}

/// Reads into the pool's frames through a [`UringRuntime`]'s ring: one
/// `READ` (adjacent frames) or `READV` per request, straight into the
/// frames, no copy, no thread; what the page cache holds of a buffered
/// read is copied in `start_read` instead ([`UringBuilder::nowait`]). Get
/// one from [`UringRuntime::engine`].
///
/// A read started outside the runtime's [`block_on`](UringRuntime::block_on)
/// (a stream polled by another executor) fails at once with an error saying
/// so: nothing would ever reap it. Another executor *nested inside*
/// `block_on` (`futures::executor::block_on(stream.next())` within the
/// runtime's future) cannot be told apart from the runtime and hangs on
/// the first read the page cache does not hold: that read goes to the
/// ring, which only the outer `block_on` reaps. Await instead.
#[derive(Clone)]
pub struct UringEngine {
    driver: Rc<Driver>,
}

impl fmt::Debug for UringEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringEngine")
            .field("stats", &self.driver.stats())
            .field("in_flight", &self.driver.in_flight())
            .finish()
    }
}

impl UringEngine {
    /// What this engine's runtime did so far.
    pub fn stats(&self) -> EngineStats {
        self.driver.stats()
    }

    /// Registers `pool`'s memory with the ring as fixed buffers, so that
    /// reads into adjacent frames of it are `READ_FIXED`s: the kernel then
    /// maps the frames once instead of on every read (for 8 KiB `O_DIRECT`
    /// reads, a measurable share of each read's CPU time). The kernel pins
    /// the pool's memory, which counts against `RLIMIT_MEMLOCK` (`ulimit
    /// -l`) unless the process has `CAP_IPC_LOCK`; the ring keeps a handle
    /// on the pool until the runtime is dropped.
    ///
    /// One pool per ring: registering the same pool again does nothing;
    /// another pool fails with [`io::ErrorKind::AlreadyExists`]. A failure
    /// (the memory lock limit, an old kernel) leaves reads working as
    /// before, with an error naming the cause.
    pub fn register_pool(&self, pool: &pagestream::BufferPool) -> io::Result<()> {
        self.driver.register_pool(pool)
    }
}

impl IoEngine for UringEngine {
    type File = UringFile;

    fn start_read(&self, file: &UringFile, req: ReadRequest) {
        if !self.driver.entered.load(Ordering::Acquire) {
            let err = io::Error::other(
                "pagestream-uring: a read was started outside UringRuntime::block_on; \
                 poll streams of a UringEngine inside its runtime's block_on",
            );
            // An error ends the request: there is no remainder to issue.
            drop(req.complete(Err(err)));
            return;
        }
        if let Some(rest) = self.driver.read_cached(file, req) {
            self.driver.push(file, rest);
        }
    }

    fn name(&self) -> &'static str {
        "uring"
    }
}
