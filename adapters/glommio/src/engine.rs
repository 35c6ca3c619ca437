//! [`GlommioEngine`]: one glommio DMA read per request, copied into the
//! frames, each completed by its own local task.
//!
//! # How the engine keeps pagestream's engine contract (`docs/design.md` §5)
//!
//! - **Completion on its own.** [`IoEngine::start_read`] spawns a detached
//!   task on the current glommio executor (`glommio::spawn_local`) that
//!   reads, copies into the request's frames and calls
//!   [`ReadRequest::complete`], which publishes the frames and wakes every
//!   waiter; a short read's remainder is read by the same task, until the
//!   request is over. Nothing depends on the issuing stream being polled or
//!   alive, so an abandoned stream never holds up another stream waiting for
//!   the same block.
//! - **Cancelled reads go back to EMPTY, never while the kernel may write.**
//!   The kernel never writes into the frames at all: glommio reads into its
//!   own DMA buffer, which it keeps until the kernel is done, and the frames
//!   are written only by the copy, on this thread, just before `complete`.
//!   If the task is dropped, the request is dropped with it and its `Drop`
//!   returns the frames to EMPTY and tells the stream the read was
//!   cancelled. glommio does *not* drop a task waiting for I/O when its
//!   executor is dropped (it leaks it), so the engine also keeps a
//!   per-thread registry of its reads in flight: [`cancel_reads_in_flight`]
//!   (and thread exit) drops the requests still in it. That is always safe
//!   because the kernel never writes into the frames.
//! - **Memory is never freed under a read in flight.** The request holds an
//!   `Arc` of the pool's memory and the task holds the request and an `Rc`
//!   of the file; glommio owns the DMA buffer the kernel writes.
//! - **Wakers.** The task runs on the executor that started the read, so
//!   completion wakes the waiting streams' wakers from that executor's
//!   thread. Keep a pool used by glommio streams on that one executor (one
//!   pool per executor, thread-per-core): a read completed by another
//!   thread would wake a glommio task from a foreign thread, which glommio
//!   0.9 has to route through its cross-thread notifier.

use crate::file::{FileInner, GlommioFile};
use pagestream::{IoEngine, ReadRequest};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// Reads into the pool's frames through glommio DMA files, on the glommio
/// executor of the thread that starts each read.
///
/// **It copies.** glommio 0.9 reads only into buffers it allocates itself
/// (`DmaFile::read_at_aligned` returns a `ReadResult`; its `DmaBuffer` has no
/// public constructor over foreign memory), so every read lands in a glommio
/// buffer and is then copied into the frames with
/// [`ReadRequest::copy_from`]: one `memcpy` of every byte read.
/// [`GlommioEngine::stats`] measures it (`bytes_copied`, `copy_time`).
///
/// `!Send`, like the files it reads: it lives on its executor.
#[derive(Clone, Default)]
pub struct GlommioEngine {
    counters: Rc<Counters>,
}

#[derive(Default)]
struct Counters {
    reads: Cell<u64>,
    bytes_read: Cell<u64>,
    bytes_copied: Cell<u64>,
    copy_ns: Cell<u64>,
}

fn bump(c: &Cell<u64>, by: u64) {
    c.set(c.get().wrapping_add(by));
}

/// What a [`GlommioEngine`] (and its clones) did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Reads submitted, remainders of short reads included.
    pub reads: u64,
    /// Bytes the device delivered into glommio's buffers (including
    /// alignment padding of unaligned remainders).
    pub bytes_read: u64,
    /// Bytes copied from glommio's buffers into frames.
    pub bytes_copied: u64,
    /// Time spent copying.
    pub copy_time: Duration,
}

impl EngineStats {
    /// The counters by name, in the shape every engine shares (the copy
    /// time as `copy_nanos`).
    pub fn counters(&self) -> pagestream::EngineCounters {
        pagestream::EngineCounters(vec![
            ("reads", self.reads),
            ("bytes_read", self.bytes_read),
            ("bytes_copied", self.bytes_copied),
            (
                "copy_nanos",
                u64::try_from(self.copy_time.as_nanos()).unwrap_or(u64::MAX),
            ),
        ])
    }

    /// Copy throughput in GiB/s (`None` before anything was copied).
    pub fn copy_gib_per_s(&self) -> Option<f64> {
        let s = self.copy_time.as_secs_f64();
        (self.bytes_copied > 0 && s > 0.0)
            .then(|| self.bytes_copied as f64 / s / f64::from(1u32 << 30))
    }
}

impl fmt::Debug for GlommioEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlommioEngine")
            .field("stats", &self.stats())
            .finish()
    }
}

impl GlommioEngine {
    /// A new engine.
    pub fn new() -> GlommioEngine {
        GlommioEngine::default()
    }

    /// What this engine and its clones did so far.
    pub fn stats(&self) -> EngineStats {
        let c = &self.counters;
        EngineStats {
            reads: c.reads.get(),
            bytes_read: c.bytes_read.get(),
            bytes_copied: c.bytes_copied.get(),
            copy_time: Duration::from_nanos(c.copy_ns.get()),
        }
    }
}

impl IoEngine for GlommioEngine {
    type File = GlommioFile;

    /// Spawns the read's task on the current glommio executor. Must be
    /// called on the executor that opened `file` (glommio panics outside an
    /// executor; the file, being `!Send`, cannot be on another thread).
    fn start_read(&self, file: &GlommioFile, req: ReadRequest) {
        let task = read_task(Rc::clone(&file.inner), Rc::clone(&self.counters), req);
        // Detached: the task completes the read whatever happens to the
        // stream that started it.
        glommio::spawn_local(task).detach();
    }

    fn name(&self) -> &'static str {
        "glommio"
    }
}

/// A read's request, shared between its task and this thread's registry
/// of reads in flight (so [`cancel_reads_in_flight`] can take it).
type Slot = Rc<RefCell<Option<ReadRequest>>>;

/// Reads started on this thread and not yet over.
#[derive(Default)]
struct InFlight {
    next: Cell<u64>,
    reads: RefCell<HashMap<u64, Weak<RefCell<Option<ReadRequest>>>>>,
}

/// A panic caught while cancelling a read.
type Panic = Box<dyn std::any::Any + Send + 'static>;

impl InFlight {
    /// Cancels every read in the registry, and returns how many, with the
    /// first panic a cancellation raised. Dropping a request runs user code
    /// (its finish hooks, its waiters' wakers); a panic there must not stop
    /// the loop, or the reads after it would stay "being read" forever and
    /// every stream waiting for their blocks would hang.
    fn cancel_all(&self) -> (usize, Option<Panic>) {
        let reads = std::mem::take(&mut *self.reads.borrow_mut());
        let mut n = 0;
        let mut panic = None;
        for slot in reads.into_values().filter_map(|w| w.upgrade()) {
            // Take it out first: dropping a request runs wake-ups, which
            // must not find the slot borrowed.
            let req = slot.borrow_mut().take();
            if let Some(req) = req {
                n += 1;
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(req)));
                if let Err(p) = r {
                    panic.get_or_insert(p);
                }
            }
        }
        (n, panic)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // At thread exit a panic escaping a thread-local's destructor would
        // abort the process; the panic hook has already reported it.
        drop(self.cancel_all());
    }
}

thread_local! {
    static IN_FLIGHT: InFlight = InFlight::default();
}

/// Cancels every read a [`GlommioEngine`] started on this thread that has
/// not finished: their requests are dropped, so their frames go back to
/// EMPTY and their streams see [`pagestream::ReadError::Cancelled`]. Returns
/// how many reads it cancelled. Safe at any time: the kernel never writes
/// into frames (glommio reads into its own buffers), so a read in flight
/// can be abandoned; its task, if it ever runs again, discards the data.
///
/// Why it exists: when a glommio executor is dropped, tasks still waiting
/// for I/O are not dropped but leaked, and a leaked read would leave its
/// frames "being read" forever — a stream on a pool that outlives the
/// executor would then wait forever for those blocks. Call this after
/// `LocalExecutor::run` returns (before dropping the executor) whenever a
/// pool may outlive the executor; it also runs by itself when the thread
/// exits.
///
/// # Panics
///
/// If a cancelled read's finish hook (or a waker it wakes) panics: every
/// read is cancelled first, then the first such panic is resumed.
pub fn cancel_reads_in_flight() -> usize {
    let (n, panic) = IN_FLIGHT
        .try_with(InFlight::cancel_all)
        .unwrap_or((0, None));
    if let Some(p) = panic {
        std::panic::resume_unwind(p);
    }
    n
}

/// Waits until every read a [`GlommioEngine`] started on this thread has
/// ended (completed, failed, or cancelled and its glommio read returned),
/// or until `timeout` has passed; returns how many are still going (0 when
/// all ended). Must run on the glommio executor the reads run on.
///
/// Why it exists: glommio leaks, rather than drops, tasks still waiting for
/// I/O when its executor ends, and a read's task holds its file: a stream
/// dropped with reads in flight just before the executor's main future
/// returns would leave the file's descriptors open for the life of the
/// process; and glommio closes a dropped file only on its next I/O cycle,
/// which this lets run. Await this at the end of the executor's main future (the
/// `glommio` runtime of `pagestream-runtimes` does), then call
/// [`cancel_reads_in_flight`] for whatever the timeout left.
pub async fn settle_reads(timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let n = IN_FLIGHT.try_with(|r| r.reads.borrow().len()).unwrap_or(0);
        // A timer, not a yield: glommio closes a dropped file on its next
        // I/O cycle, which a timer makes sure runs (so a file whose last
        // handle was just dropped, by the workload or a read's task, is
        // closed before the executor ends).
        glommio::timer::sleep(Duration::from_micros(100)).await;
        if n == 0 || Instant::now() >= deadline {
            return n;
        }
    }
}

/// Most bytes one glommio read asks for. Its buffers come from glommio's
/// registered `io_memory`, which `RLIMIT_MEMLOCK` bounds (8 MiB is common),
/// so a larger request (up to [`pagestream::MAX_IO_COMBINE_LIMIT`] blocks) is
/// read in parts: each part is reported as a short read, and the remainder
/// goes on in the same task.
const MAX_READ_BYTES: usize = 1 << 20;

/// Reads the request in `slot` to its end: reads the enclosing aligned
/// range into a glommio buffer, copies the wanted bytes into the frames,
/// completes, and reads whatever remainder a short read leaves. Stops when
/// the request has been taken away ([`cancel_reads_in_flight`]).
async fn read_task(file: Rc<FileInner>, counters: Rc<Counters>, req: ReadRequest) {
    let slot: Slot = Rc::new(RefCell::new(Some(req)));
    let id = IN_FLIGHT.with(|r| {
        let id = r.next.get();
        r.next.set(id + 1);
        r.reads.borrow_mut().insert(id, Rc::downgrade(&slot));
        id
    });
    loop {
        let Some((offset, want)) = slot
            .borrow()
            .as_ref()
            .map(|req| (req.offset(), req.len_bytes()))
        else {
            break;
        };
        // Requests are block-aligned except the remainder of a short read
        // that ended mid-sector; read the aligned range around it.
        let start = offset - offset % file.align;
        let head = (offset - start) as usize;
        let want = want.min(MAX_READ_BYTES);
        let span = (head + want).div_ceil(file.align as usize) * file.align as usize;
        bump(&counters.reads, 1);
        let read = file.dma.read_at_aligned(start, span).await;
        let Some(mut req) = slot.borrow_mut().take() else {
            break; // cancelled while glommio was reading
        };
        let result = match read {
            Ok(buf) => {
                bump(&counters.bytes_read, buf.len() as u64);
                let useful = buf.len().saturating_sub(head).min(want);
                let t = Instant::now();
                let copied = req.copy_from(&buf[head.min(buf.len())..][..useful]);
                bump(&counters.copy_ns, t.elapsed().as_nanos() as u64);
                bump(&counters.bytes_copied, copied as u64);
                Ok(copied)
            }
            Err(e) => Err(io::Error::from(e)),
        };
        match req.complete(result) {
            Some(rest) => *slot.borrow_mut() = Some(rest),
            None => break,
        }
    }
    let _ = IN_FLIGHT.try_with(|r| r.reads.borrow_mut().remove(&id));
}
