//! [`TokioUringEngine`]: one io_uring read per request, each completed by
//! its own task.
//!
//! # How the engine keeps pagestream's engine contract (`docs/design.md` §5)
//!
//! - **Completion on its own.** [`IoEngine::start_read`] pushes the read's
//!   SQE to the current tokio-uring ring (at once, in the order reads are
//!   started) and spawns a task (`tokio_uring::spawn`) that awaits its CQE
//!   and calls [`ReadRequest::complete`], which publishes the frames and
//!   wakes every waiter; a short read's remainder is submitted again by the
//!   same task, until the request is over. The
//!   task is detached: nothing in it depends on the stream that issued the
//!   read being polled or alive, so a stream that is dropped, or simply not
//!   polled, never holds up another stream waiting for the same block.
//! - **Cancelled reads go back to EMPTY, never while the kernel may write.**
//!   The request is moved into the operation's stable data
//!   ([`crate::buf`]). If the task is dropped mid-read (runtime shutdown),
//!   tokio-uring drops that data when it sees fit, at shutdown before the
//!   kernel is done; so the data's drop never releases the request but
//!   keeps it on the thread ("orphaned", frames still being read) until
//!   [`crate::try_start`] (or [`crate::release_orphans_after`]) returns,
//!   when every completion is known to be in. Only then does the request's
//!   `Drop` return its frames to EMPTY and tell the stream the read was
//!   cancelled. A frame is therefore never handed out, valid or empty,
//!   while the kernel may still write into it.
//! - **Memory is never freed under a read in flight.** The request holds an
//!   `Arc` of the pool's memory, and the stable data holds the request, the
//!   `iovec` array, any bounce buffer and an `Arc` of the open file, so
//!   neither the frames nor the descriptor can go away before the CQE, even
//!   if every stream, guard and pool handle is dropped.
//! - **Wakers.** Completion runs on the runtime's thread; it wakes wakers of
//!   any runtime (the core's wake-ups are thread-safe).

use crate::buf;
use crate::TokioUringFile;
use pagestream::{IoEngine, ReadRequest};
use pagestream_uring::op::Kind;
use std::fmt;
use std::io;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Reads into the pool's frames with io_uring, on the tokio-uring runtime of
/// the thread that starts each read.
///
/// A cheap handle (`Clone`, `Send`, `Sync`): the ring is the calling
/// thread's, so the engine may be built anywhere, but streams using it must
/// be polled inside `tokio_uring::start` (or [`crate::try_start`]), where
/// reads are started. A read started anywhere else — no tokio runtime, a
/// multi-thread one, or a plain current-thread one (as under
/// `#[tokio::main(flavor = "current_thread")]`) — fails with an error
/// saying so, and the stream goes on as after any failed read. (On a plain
/// current-thread runtime tokio-uring's own panic message is printed by
/// the panic hook first: see `start_read` for why; with `panic = "abort"`
/// that case aborts.)
///
/// Reads go straight into the frames, no copy: one `READ` when the
/// request's frames are adjacent in memory, one `READV` with a buffer per
/// frame otherwise. Only an `O_DIRECT` read at an unaligned offset (the
/// remainder of a short read that ended mid-sector, which real files do not
/// produce but fault injection does) goes through a bounce buffer.
#[derive(Clone)]
pub struct TokioUringEngine {
    counters: Arc<Counters>,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    vectored: AtomicU64,
    bounced: AtomicU64,
    bytes: AtomicU64,
}

/// What a [`TokioUringEngine`] (and its clones) submitted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Reads submitted to io_uring, remainders of short reads included.
    pub reads: u64,
    /// Of those, `READV`s (the request's frames were not adjacent).
    pub vectored: u64,
    /// Of those, reads through a bounce buffer (unaligned `O_DIRECT`).
    pub bounced: u64,
    /// Bytes the kernel reported read.
    pub bytes: u64,
}

impl EngineStats {
    /// The counters by name, in the shape every engine shares.
    pub fn counters(&self) -> pagestream::EngineCounters {
        pagestream::EngineCounters(vec![
            ("reads", self.reads),
            ("vectored", self.vectored),
            ("bounced", self.bounced),
            ("bytes", self.bytes),
        ])
    }
}

impl fmt::Debug for TokioUringEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokioUringEngine")
            .field("stats", &self.stats())
            .finish()
    }
}

impl TokioUringEngine {
    /// An engine, after checking that io_uring can be used here: a small
    /// ring is set up and torn down. Fails with a clear error where io_uring
    /// is unavailable (`sysctl kernel.io_uring_disabled`, a seccomp filter,
    /// an old kernel); see [`crate::probe`].
    pub fn new() -> io::Result<TokioUringEngine> {
        crate::probe()?;
        Ok(TokioUringEngine {
            counters: Arc::new(Counters::default()),
        })
    }

    /// What this engine and its clones submitted so far.
    pub fn stats(&self) -> EngineStats {
        let c = &self.counters;
        EngineStats {
            reads: c.reads.load(Ordering::Relaxed),
            vectored: c.vectored.load(Ordering::Relaxed),
            bounced: c.bounced.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
        }
    }
}

impl IoEngine for TokioUringEngine {
    type File = TokioUringFile;

    fn start_read(&self, file: &TokioUringFile, req: ReadRequest) {
        // tokio-uring runs a current-thread tokio runtime; anything else
        // (no runtime, a multi-thread runtime) cannot be a tokio-uring one.
        let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
        if !matches!(flavor, Ok(tokio::runtime::RuntimeFlavor::CurrentThread)) {
            fail_outside(req);
            return;
        }
        // The SQE is pushed now, in the order reads are started, rather than
        // when a spawned task is first polled: with the small submission
        // queue of `runtime_builder` the reads then go to the kernel a few
        // at a time while the stream is still starting the rest, instead of
        // all together when the thread parks.
        let first = match submit(file, &self.counters, req) {
            Ok(first) => first,
            Err(req) => {
                fail_outside(req);
                return;
            }
        };
        let task = read_task(file.clone(), Arc::clone(&self.counters), first);
        // Detached: the task completes the read whatever happens to the
        // stream. Dropping the JoinHandle does not cancel the task.
        drop(tokio_uring::spawn(task));
    }

    fn name(&self) -> &'static str {
        "tokio-uring"
    }
}

/// Ends `req` with the error for a read started outside a tokio-uring
/// runtime.
fn fail_outside(req: ReadRequest) {
    let err = io::Error::other(
        "pagestream-tokio-uring: a read was started outside a tokio-uring runtime; \
         poll streams inside tokio_uring::start (or pagestream_tokio_uring::try_start)",
    );
    // An error ends the request: there is no remainder to issue.
    drop(req.complete(Err(err)));
}

/// The panic message of tokio-uring's `UnsubmittedOneshot::submit` on a
/// thread that is not inside a tokio-uring runtime.
const NOT_IN_CONTEXT: &str = "not in runtime context";

/// Builds the read of `req` and pushes its SQE to the current thread's
/// ring, on a current-thread tokio runtime that may or may not be
/// tokio-uring's: gives the request back if the thread is not inside a
/// tokio-uring runtime.
///
/// Whether it is cannot be asked: tokio-uring 0.5 keeps its runtime context
/// in a crate-private thread-local and every public entry point that needs
/// it panics without it; the tokio runtime it runs on is an ordinary
/// current-thread one (inside a `LocalSet`, which cannot be detected either
/// without a panic). So the submission itself is the test: tokio-uring
/// looks the context up, and panics without one, before it pushes the SQE
/// or keeps anything; the op dropped by the unwinding goes to its
/// [`buf::Rescue`], never having reached the kernel, and the request comes
/// back whole. Only that panic is taken for "not inside tokio-uring"; any
/// other resumes unchanged (its op, rescued, dropped: the request ends as
/// cancelled).
///
/// A remainder is submitted the same way: its task runs inside tokio-uring
/// unless the program polls a `LocalSet` of its own elsewhere.
fn submit(
    file: &TokioUringFile,
    counters: &Counters,
    req: ReadRequest,
) -> Result<buf::InFlight, ReadRequest> {
    let rescue = buf::Rescue::armed();
    let (op, kind) = buf::read_op(file, req, Rc::clone(&rescue));
    // AssertUnwindSafe: after a panic nothing the closure touched is used
    // again but the rescued op, which `submit` had not started on.
    let submitted = std::panic::catch_unwind(AssertUnwindSafe(|| op.submit()));
    let rescued = rescue.disarm();
    match submitted {
        Ok(in_flight) => {
            count(counters, kind);
            Ok(in_flight)
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str));
            match rescued {
                Some(op) if message.is_some_and(|m| m.contains(NOT_IN_CONTEXT)) => {
                    buf::discard(panic);
                    Err(op.into_request())
                }
                _ => std::panic::resume_unwind(panic),
            }
        }
    }
}

/// Counts a submitted read of `kind`.
fn count(counters: &Counters, kind: Kind) {
    counters.reads.fetch_add(1, Ordering::Relaxed);
    match kind {
        Kind::Vectored => {
            counters.vectored.fetch_add(1, Ordering::Relaxed);
        }
        Kind::Bounced => {
            counters.bounced.fetch_add(1, Ordering::Relaxed);
        }
        // `Single` (this engine registers no buffers: never `Fixed`).
        _ => {}
    }
}

/// Awaits the read `first` (already submitted) and completes its request,
/// then submits and awaits whatever remainder a short read leaves, until
/// the request is over.
async fn read_task(file: TokioUringFile, counters: Arc<Counters>, first: buf::InFlight) {
    let mut op = first;
    loop {
        let (result, req) = op.await;
        if let Ok(n) = &result {
            counters.bytes.fetch_add(*n as u64, Ordering::Relaxed);
        }
        match req.complete(result) {
            Some(rest) => match submit(&file, &counters, rest) {
                Ok(next) => op = next,
                Err(rest) => {
                    fail_outside(rest);
                    break;
                }
            },
            None => break,
        }
    }
}
