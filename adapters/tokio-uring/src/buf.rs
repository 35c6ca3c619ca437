//! Reads as tokio-uring one-shot operations.
//!
//! A read's SQE and the memory it points to come from
//! [`pagestream_uring::op::ReadOp`] (the one place where memory is handed
//! to the kernel, shared with pagestream-uring's own driver; its module
//! docs give the invariant). Here the op becomes the *stable data* of a
//! tokio-uring one-shot operation ([`tokio_uring::UnsubmittedOneshot`]),
//! which tokio-uring means to keep until the kernel posts the operation's
//! completion, *also when the future awaiting it is dropped*: the driver
//! then parks the data as an "ignored" operation and drops it once the CQE
//! arrives. Whatever the kernel may still write must stay alive and
//! exclusively ours until then. That is the op's obligation; it is kept by
//! ownership alone (nothing here uses `unsafe`), and by never releasing an
//! op from the data's drop (below), since tokio-uring may drop the data
//! early.
//!
//! # Data dropped before its completion: orphans
//!
//! tokio-uring 0.5 does not keep that promise at shutdown. `Runtime`'s drop
//! drops the tasks first (ours among them), which parks the data of every
//! read still in flight as an "ignored" operation; then the driver's drop
//! marks every unfinished operation ignored *by replacing its entry*, which
//! drops the data parked there, and only afterwards submits the
//! cancellations and waits for the CQEs. Dropping a [`ReadOp`] returns its
//! frames to EMPTY and frees its `iovec` array and bounce buffer, so
//! another thread's stream on the same pool could claim those frames while
//! the kernel still writes into them.
//!
//! So [`Stored`]'s drop never releases an op that still holds its request:
//! it cannot tell whether tokio-uring drops it after the CQE (a task dropped
//! after its read was over, an ignored operation whose CQE came) or before
//! it (the driver's drop). It moves the op to this thread's *orphans*
//! instead, where the frames stay "being read" and the memory stays
//! allocated. An op orphaned before its CQE was orphaned by a driver's drop
//! that then waits for that CQE (tokio-uring 0.5's driver drop either
//! returns with every CQE in or aborts the process: its final check that
//! every operation is done panics, during the unwind of any panic that
//! stopped its wait). Hence the rule [`release_orphans_after`] relies on:
//! every op orphaned *while a closure runs* is done with once the closure
//! returns (or unwinds), because every driver dropped inside the closure
//! has finished dropping by then, and a driver whose drop started before
//! the closure (were the closure called from inside it) cannot orphan
//! anything until the closure is over. Releasing an orphan drops its op:
//! the request ends as cancelled (frames back to EMPTY, waiters told),
//! which runs user code (finish hooks, wakers) outside tokio-uring, each
//! under `catch_unwind`; the first panic is handed back to be resumed.
//! Orphans nobody releases are leaked when the thread exits, never freed.
//!
//! Our tasks are detached and never aborted, so a read's data is parked
//! only when its task is dropped with the `LocalSet` it was spawned on:
//! the runtime's at shutdown, or a `LocalSet` of the program's own nested
//! inside the runtime and dropped with reads in flight. Those reads' frames
//! stay "being read" until the enclosing [`crate::try_start`] (or
//! [`release_orphans_after`]) returns.
//!
//! A read that could not be submitted (its SQE never reached the ring)
//! does not become an orphan: its [`Rescue`] takes the op back.
//!
//! Why not `File::read_at` with an `IoBufMut` wrapper: it needs a
//! `tokio_uring::fs::File`, which is `!Send` (an `Rc`'d descriptor), while
//! pagestream's files are cheap `Send + Clone` handles; it also panics when
//! submission fails. The one-shot API gives the same ownership guarantee
//! with one operation type for single-buffer, vectored and bounced reads.

use pagestream::ReadRequest;
use pagestream_uring::op::{Kind, ReadOp};
use pagestream_uring::UringFile;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use tokio_uring::{InFlightOneshot, OneshotOutputTransform, UnsubmittedOneshot};

/// A panic caught while releasing orphans.
pub(crate) type Panic = Box<dyn Any + Send + 'static>;

/// The ops of this thread that tokio-uring dropped before their CQE was
/// known to be in (module docs).
struct Orphans(RefCell<Vec<ReadOp>>);

impl Drop for Orphans {
    fn drop(&mut self) {
        // Thread exit: nobody said the kernel is done with these. Leak them
        // (their frames stay "being read"), never free them.
        std::mem::forget(std::mem::take(self.0.get_mut()));
    }
}

thread_local! {
    static ORPHANS: Orphans = const { Orphans(RefCell::new(Vec::new())) };
}

/// Keeps `op`, which tokio-uring dropped, until it is released.
fn orphan(op: ReadOp) {
    let mut op = Some(op);
    let _ = ORPHANS.try_with(|o| {
        if let Ok(mut v) = o.0.try_borrow_mut() {
            v.push(op.take().expect("taken once"));
        }
    });
    // This thread's orphans are gone (thread exit) or being changed under
    // us (cannot happen: nothing here runs user code while the list is
    // borrowed): leak the op rather than free it.
    std::mem::forget(op);
}

/// How many orphans this thread holds now.
fn orphans_len() -> usize {
    ORPHANS.try_with(|o| o.0.borrow().len()).unwrap_or(0)
}

/// Takes this thread's newest orphan, if it holds more than `keep`.
fn pop_orphan_above(keep: usize) -> Option<ReadOp> {
    ORPHANS
        .try_with(|o| {
            let mut v = o.0.borrow_mut();
            if v.len() > keep {
                v.pop()
            } else {
                None
            }
        })
        .ok()
        .flatten()
}

/// Runs `f`, then releases every read orphaned on this thread while it
/// ran, whether it returned or unwound (see the module docs for why that is
/// sound); returns `f`'s output, or the first panic of `f` or of a
/// released read's user code, in that order of precedence.
pub(crate) fn release_orphans_after<R>(f: impl FnOnce() -> R) -> Result<R, Panic> {
    let keep = orphans_len();
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let (out, mut panic) = match out {
        Ok(r) => (Some(r), None),
        Err(p) => (None, Some(p)),
    };
    while let Some(op) = pop_orphan_above(keep) {
        // Dropping the op ends its request as cancelled (user code).
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(op))) {
            keep_first(&mut panic, p);
        }
    }
    match (out, panic) {
        (Some(r), None) => Ok(r),
        (_, Some(p)) => Err(p),
        (None, None) => unreachable!("f either returned or panicked"),
    }
}

/// Keeps `p` in `first` unless a panic is there already; then drops `p`
/// without unwinding ([`discard`]).
fn keep_first(first: &mut Option<Panic>, p: Panic) {
    match first {
        None => *first = Some(p),
        Some(_) => discard(p),
    }
}

/// Drops a panic payload nobody will resume. Its drop is user code and may
/// panic itself: that is caught, and that second payload leaked.
pub(crate) fn discard(p: Panic) {
    if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(p))) {
        std::mem::forget(again);
    }
}

/// Turns the CQE into `(result, request)` ([`ReadOp::finish`]).
pub(crate) struct ReadDone;

/// A submitted read: resolves to `(result, request)` when its CQE arrives.
pub(crate) type InFlight = InFlightOneshot<Stored, ReadDone>;

/// The stable data of a read: its [`ReadOp`], which is taken out when the
/// CQE is turned into the result, and the [`Rescue`] that gets the op
/// back if submitting it fails. Dropped with the op still in it after the
/// submission, it orphans the op (module docs).
pub(crate) struct Stored {
    op: Option<ReadOp>,
    rescue: Rc<Rescue>,
}

/// Where a read that could not be submitted goes instead of being dropped.
///
/// tokio-uring's `UnsubmittedOneshot::submit` panics when the thread is not
/// inside a tokio-uring runtime, before it pushes the SQE; the unwinding
/// drops the operation, and with it the request, which would end as
/// cancelled. While the rescue is armed (from before `submit` until it
/// returns), dropping the [`Stored`] hands its op here instead, so the
/// engine can end the request with an error saying what is wrong. The op
/// was never given to the kernel, so nothing may still write into its
/// memory.
#[derive(Default)]
pub(crate) struct Rescue {
    armed: Cell<bool>,
    op: RefCell<Option<ReadOp>>,
}

impl Rescue {
    /// A rescue, armed.
    pub(crate) fn armed() -> Rc<Rescue> {
        let r = Rc::new(Rescue::default());
        r.armed.set(true);
        r
    }

    /// Disarms the rescue (the submission is over) and returns the op it
    /// took, if the submission dropped it.
    pub(crate) fn disarm(&self) -> Option<ReadOp> {
        self.armed.set(false);
        self.op.borrow_mut().take()
    }
}

impl Drop for Stored {
    fn drop(&mut self) {
        let Some(op) = self.op.take() else {
            return;
        };
        if self.rescue.armed.get() {
            // Never submitted: nothing of it reached the kernel.
            *self.rescue.op.borrow_mut() = Some(op);
            return;
        }
        // Submitted, and the CQE may not be in (module docs).
        orphan(op);
    }
}

/// The one-shot operation that reads `req` from `file`, ready to submit on
/// the current thread's tokio-uring runtime, and which SQE it is. A failed
/// submission leaves the op in `rescue` (armed).
pub(crate) fn read_op(
    file: &UringFile,
    req: ReadRequest,
    rescue: Rc<Rescue>,
) -> (UnsubmittedOneshot<Stored, ReadDone>, Kind) {
    let (op, sqe) = ReadOp::new(file, req);
    let kind = op.kind();
    let data = Stored {
        op: Some(op),
        rescue,
    };
    (UnsubmittedOneshot::new(data, ReadDone, sqe), kind)
}

impl OneshotOutputTransform for ReadDone {
    type Output = (io::Result<usize>, ReadRequest);
    type StoredData = Stored;

    fn transform_oneshot_output(
        self,
        mut data: Stored,
        cqe: io_uring::cqueue::Entry,
    ) -> Self::Output {
        // The CQE is in: the kernel is done with every pointer in the SQE.
        // (A submitted op's rescue is disarmed: `Stored` is only ever
        // emptied here or by a failed submission.)
        let op = data.op.take().expect("a submitted read keeps its op");
        op.finish(cqe.result())
    }
}
