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
//! Why not `File::read_at` with an `IoBufMut` wrapper: it needs a
//! `tokio_uring::fs::File`, which is `!Send` (an `Rc`'d descriptor), while
//! pagestream's files are cheap `Send + Clone` handles; it also panics when
//! submission fails. The one-shot API gives the same ownership guarantee
//! with one operation type for single-buffer, vectored and bounced reads.

use pagestream::ReadRequest;
use pagestream_uring::op::{Kind, ReadOp};
use pagestream_uring::UringFile;
use std::io;
use tokio_uring::{InFlightOneshot, OneshotOutputTransform, UnsubmittedOneshot};

/// Turns the CQE into `(result, request)` ([`ReadOp::finish`]).
pub(crate) struct ReadDone;

/// A submitted read: resolves to `(result, request)` when its CQE arrives.
pub(crate) type InFlight = InFlightOneshot<ReadOp, ReadDone>;

/// The one-shot operation that reads `req` from `file`, ready to submit on
/// the current thread's tokio-uring runtime, and which SQE it is.
pub(crate) fn read_op(
    file: &UringFile,
    req: ReadRequest,
) -> (UnsubmittedOneshot<ReadOp, ReadDone>, Kind) {
    let (op, sqe) = ReadOp::new(file, req);
    let kind = op.kind();
    (UnsubmittedOneshot::new(op, ReadDone, sqe), kind)
}

impl OneshotOutputTransform for ReadDone {
    type Output = (io::Result<usize>, ReadRequest);
    type StoredData = ReadOp;

    fn transform_oneshot_output(self, data: ReadOp, cqe: io_uring::cqueue::Entry) -> Self::Output {
        // The CQE is in: the kernel is done with every pointer in the SQE.
        data.finish(cqe.result())
    }
}
