//! The one place where memory is handed to the kernel.
//!
//! A read is submitted as a tokio-uring one-shot operation
//! ([`tokio_uring::UnsubmittedOneshot`]) whose *stable data* is a [`ReadOp`]:
//! it owns the [`ReadRequest`] (and so the frames it reads into, and through
//! the request an `Arc` of the pool's memory), the `iovec` array the SQE
//! points to, an optional bounce buffer, and an `Arc` of the open file (so
//! the descriptor stays open). tokio-uring keeps the stable data until the
//! kernel posts the operation's completion, *also when the future awaiting
//! it is dropped*: the driver then parks the data as an "ignored" operation
//! and drops it only after the CQE arrives (or, when the runtime shuts down,
//! after it has cancelled the operation and waited for its CQE). Whatever
//! the kernel may still write stays alive and exclusively ours until then.
//!
//! Why not `File::read_at` with an `IoBufMut` wrapper: it needs a
//! `tokio_uring::fs::File`, which is `!Send` (an `Rc`'d descriptor), while
//! pagestream's files are cheap `Send + Clone` handles; it also panics when
//! submission fails. The one-shot API gives the same ownership guarantee
//! with one operation type for single-buffer, vectored and bounced reads.
//!
//! The invariant every pointer in an SQE built here relies on (tokio-uring's
//! `UnsubmittedOneshot::new` is a safe function, so it is ours to keep):
//!
//! 1. Frame pointers come from [`ReadRequest::raw_buffers`]: valid and
//!    exclusively this request's until it is completed or dropped, and the
//!    request lives inside the stable data until the CQE.
//! 2. The `iovec` array and the bounce buffer are heap allocations owned by
//!    the stable data; moving a `Vec` does not move its heap buffer, and
//!    neither is touched until the CQE.
//! 3. The file descriptor is owned by `Arc<FileInner>` in the stable data.
//!
//! Nothing here uses `unsafe`: the invariant is upheld by ownership alone.

use crate::file::{FileInner, FRAME_ALIGN};
use io_uring::{opcode, types};
use pagestream::ReadRequest;
use std::io;
use std::sync::Arc;
use tokio_uring::{InFlightOneshot, OneshotOutputTransform, UnsubmittedOneshot};

/// Largest single read submitted (aligned for any O_DIRECT alignment up to
/// 1 GiB); a longer request simply comes back short and its remainder is
/// read next.
const MAX_READ: usize = 1 << 30;

/// What the kernel reads into, kept alive by tokio-uring until the CQE.
pub(crate) struct ReadOp {
    req: ReadRequest,
    /// Keeps the descriptor in the SQE open.
    _file: Arc<FileInner>,
    /// The vector a `READV` SQE points to (empty for a single buffer).
    _iovecs: Vec<libc::iovec>,
    bounce: Option<Bounce>,
}

/// An aligned buffer for an `O_DIRECT` read whose offset is not aligned (the
/// remainder of a short read that ended mid-sector): the enclosing aligned
/// range is read into it and the wanted bytes copied into the frames.
struct Bounce {
    buf: Vec<u8>,
    /// Start of the aligned region in `buf`.
    start: usize,
    /// Bytes before the wanted offset in the aligned region.
    head: usize,
    /// Bytes wanted.
    want: usize,
}

/// Turns the CQE into `(result, request)`, copying out of a bounce buffer.
pub(crate) struct ReadDone;

/// A read of `req` from `file`, ready to submit on the current thread's
/// tokio-uring runtime.
pub(crate) type Unsubmitted = UnsubmittedOneshot<ReadOp, ReadDone>;

/// A submitted read: resolves to `(result, request)` when its CQE arrives.
pub(crate) type InFlight = InFlightOneshot<ReadOp, ReadDone>;

/// Which SQE a read became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One `READ` into adjacent frames.
    Single,
    /// One `READV`, a buffer per frame.
    Vectored,
    /// One `READ` into an aligned bounce buffer, then a copy.
    Bounced,
}

/// Builds the one-shot operation that reads `req.len_bytes()` bytes at
/// `req.offset()` of `file` into `req`'s frames.
pub(crate) fn read_op(file: Arc<FileInner>, mut req: ReadRequest) -> (Unsubmitted, Kind) {
    let fd = types::Fd(file.fd());
    let offset = req.offset();
    let len = req.len_bytes();
    let align = file.align;
    if align > 1 && (offset % align as u64 != 0 || len % align != 0) {
        // Misaligned O_DIRECT read: read the enclosing aligned range.
        let head = (offset % align as u64) as usize;
        let span = (head + len).div_ceil(align) * align;
        let mem_align = FRAME_ALIGN.max(align);
        let mut buf = vec![0u8; span + mem_align];
        let start = buf.as_ptr().align_offset(mem_align);
        let ptr = buf[start..].as_mut_ptr();
        // Invariant 2: `buf`'s heap allocation moves into the stable data
        // with the `Vec` and stays put; `start + span <= buf.len()`.
        let sqe = opcode::Read::new(fd, ptr, span.min(MAX_READ) as u32)
            .offset(offset - head as u64)
            .build();
        let data = ReadOp {
            req,
            _file: file,
            _iovecs: Vec::new(),
            bounce: Some(Bounce {
                buf,
                start,
                head,
                want: len,
            }),
        };
        return (UnsubmittedOneshot::new(data, ReadDone, sqe), Kind::Bounced);
    }
    // Invariant 1: these pointers stay valid and ours until `req` is
    // completed or dropped, and `req` moves into the stable data.
    let bufs = req.raw_buffers();
    let contiguous = bufs
        .windows(2)
        .all(|w| w[0].0.wrapping_add(w[0].1) == w[1].0);
    let (sqe, iovecs, kind) = if contiguous {
        let ptr = bufs.first().map_or(std::ptr::null_mut(), |b| b.0);
        let sqe = opcode::Read::new(fd, ptr, len.min(MAX_READ) as u32)
            .offset(offset)
            .build();
        (sqe, Vec::new(), Kind::Single)
    } else {
        let iovecs: Vec<libc::iovec> = bufs
            .iter()
            .map(|&(p, l)| libc::iovec {
                iov_base: p.cast(),
                iov_len: l,
            })
            .collect();
        // Invariant 2: the array's heap buffer moves into the stable data.
        let sqe = opcode::Readv::new(fd, iovecs.as_ptr(), iovecs.len() as u32)
            .offset(offset)
            .build();
        (sqe, iovecs, Kind::Vectored)
    };
    let data = ReadOp {
        req,
        _file: file,
        _iovecs: iovecs,
        bounce: None,
    };
    (UnsubmittedOneshot::new(data, ReadDone, sqe), kind)
}

impl OneshotOutputTransform for ReadDone {
    type Output = (io::Result<usize>, ReadRequest);
    type StoredData = ReadOp;

    fn transform_oneshot_output(self, data: ReadOp, cqe: io_uring::cqueue::Entry) -> Self::Output {
        // The CQE is in: the kernel is done with every pointer in the SQE.
        let r = cqe.result();
        let mut req = data.req;
        if r < 0 {
            return (Err(io::Error::from_raw_os_error(-r)), req);
        }
        let n = r as usize;
        match data.bounce {
            None => (Ok(n), req),
            Some(b) => {
                let useful = n.saturating_sub(b.head).min(b.want);
                let from = b.start + b.head;
                let copied = req.copy_from(&b.buf[from..from + useful]);
                (Ok(copied), req)
            }
        }
    }
}
