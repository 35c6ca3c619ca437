//! Reads as tokio-uring one-shot operations.
//!
//! A read's SQE and the memory it points to come from
//! [`pagestream_uring::op::ReadOp`] (the one place where memory is handed
//! to the kernel, shared with pagestream-uring's own driver; its module
//! docs give the invariant). Here the op becomes the *stable data* of a
//! tokio-uring one-shot operation ([`tokio_uring::UnsubmittedOneshot`]),
//! which tokio-uring keeps until the kernel posts the operation's
//! completion, *also when the future awaiting it is dropped*: the driver
//! then parks the data as an "ignored" operation and drops it only after
//! the CQE arrives (or, when the runtime shuts down, after it has cancelled
//! the operation and waited for its CQE). Whatever the kernel may still
//! write stays alive and exclusively ours until then. That is the op's
//! obligation, and `UnsubmittedOneshot::new` being a safe function, it is
//! kept by ownership alone: nothing here uses `unsafe`.
//!
//! Dropping the data of a read that did not finish cancels its request,
//! which runs user code (its finish hooks, its waiters' wakers). tokio-uring
//! does that inside its driver, while it waits for the completions of the
//! other reads in flight at shutdown; a panic unwinding out of there would
//! abandon that wait (and trip tokio-uring's own check that every operation
//! is done, a panic during the unwind: the process aborts). So the stored
//! data, [`Stored`], drops its op under `catch_unwind` and never unwinds
//! into tokio-uring; the first panic caught is kept for this thread and
//! resumed by [`crate::try_start`] once its runtime is gone ([`take_panic`]).
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

/// A panic caught while dropping a read's data.
type Panic = Box<dyn Any + Send + 'static>;

thread_local! {
    /// The first panic [`Stored`]'s drop caught on this thread and nobody
    /// has taken yet.
    static PANIC: RefCell<Option<Panic>> = const { RefCell::new(None) };
}

/// Takes the first panic caught while dropping reads' data on this thread
/// (see the module docs), if any.
pub(crate) fn take_panic() -> Option<Panic> {
    PANIC.try_with(|p| p.borrow_mut().take()).ok().flatten()
}

/// Turns the CQE into `(result, request)` ([`ReadOp::finish`]).
pub(crate) struct ReadDone;

/// A submitted read: resolves to `(result, request)` when its CQE arrives.
pub(crate) type InFlight = InFlightOneshot<Stored, ReadDone>;

/// The stable data of a read: its [`ReadOp`], which is taken out when the
/// CQE is turned into the result, and for a first submission the
/// [`Rescue`] that gets the op back if submitting it fails. Dropped with
/// the op still in it, it cancels the request without unwinding (module
/// docs).
pub(crate) struct Stored {
    op: Option<ReadOp>,
    rescue: Option<Rc<Rescue>>,
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
        if let Some(r) = &self.rescue {
            if r.armed.get() {
                *r.op.borrow_mut() = Some(op);
                return;
            }
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(op)));
        if let Err(p) = r {
            let _ = PANIC.try_with(|slot| {
                slot.borrow_mut().get_or_insert(p);
            });
        }
    }
}

/// The one-shot operation that reads `req` from `file`, ready to submit on
/// the current thread's tokio-uring runtime, and which SQE it is. With
/// `rescue` (armed), a failed submission leaves the op there.
pub(crate) fn read_op(
    file: &UringFile,
    req: ReadRequest,
    rescue: Option<Rc<Rescue>>,
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
