//! [`ReadOp`]: one io_uring read of a [`ReadRequest`] — the SQE, and what
//! must stay alive until its CQE.
//!
//! This is the one place where memory is handed to the kernel, shared by
//! every io_uring engine: this crate's [`UringEngine`](crate::UringEngine)
//! and `UringTokioEngine` keep each op in their driver's table of reads in
//! flight, `pagestream-tokio-uring` makes it the *stable data* of a
//! tokio-uring one-shot operation. Either
//! way the op is dropped, or [finished](ReadOp::finish), only after the
//! kernel has posted the read's completion.
//!
//! A `ReadOp` owns the [`ReadRequest`] (and so the frames it reads into,
//! and through the request an `Arc` of the pool's memory), the `iovec`
//! array the SQE points to, an optional bounce buffer, and a clone of the
//! open file (so the descriptor stays open). The invariant every pointer in
//! the SQE relies on:
//!
//! 1. Frame pointers come from [`ReadRequest::raw_buffers`]: valid and
//!    exclusively this request's until it is completed or dropped, and the
//!    request lives inside the op.
//! 2. The `iovec` array and the bounce buffer are heap allocations owned by
//!    the op; moving the op (or a `Vec`) does not move a heap buffer, and
//!    neither is touched until the op is finished.
//! 3. The file descriptor is owned by the op's [`UringFile`] clone.
//!
//! So the SQE stays valid for as long as its op is alive, wherever the op
//! is moved. Building the SQE needs no `unsafe`; *pushing* it to a ring is
//! `unsafe`, and the pusher's obligation is exactly that: keep the op alive
//! until the CQE (and, for a `READ_FIXED` built by
//! [`ReadOp::with_registered`], keep the memory it names registered with
//! that ring until then).

use crate::file::{UringFile, FRAME_ALIGN};
use io_uring::{opcode, squeue, types};
use pagestream::ReadRequest;
use std::fmt;
use std::io;

/// Most bytes a misaligned O_DIRECT read bounces through a buffer of its
/// own (reads may be up to `MAX_IO_COMBINE_LIMIT` blocks; such a remainder
/// is rare and need not allocate all of it).
const MAX_BOUNCE: usize = 1 << 20;

/// Largest single read submitted (aligned for any O_DIRECT alignment up to
/// 1 GiB); a longer request simply comes back short and its remainder is
/// read next.
const MAX_READ: usize = 1 << 30;

/// One read in flight: what the kernel reads into and through, kept alive
/// until the read's CQE. See the [module docs](self).
pub struct ReadOp {
    req: ReadRequest,
    /// Keeps the descriptor in the SQE open.
    _file: UringFile,
    /// The vector a `READV` SQE points to (empty for a single buffer).
    _iovecs: Vec<libc::iovec>,
    bounce: Option<Bounce>,
    kind: Kind,
}

// SAFETY: the one field that is not `Send` is the `iovec` array, whose raw
// pointers point into the request's frames; the request (`Send`) owns those
// frames exclusively until it is completed or dropped, and no Rust code
// dereferences the pointers (only the kernel does, for the read). Moving the
// op to another thread moves that ownership with it.
unsafe impl Send for ReadOp {}

impl fmt::Debug for ReadOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOp")
            .field("req", &self.req)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
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

/// Memory registered with a ring as fixed buffers
/// (`IORING_REGISTER_BUFFERS`): `len` bytes at `base`, registered as
/// consecutive buffers of [`FIXED_CHUNK`] bytes (the last one shorter),
/// indexed from 0. A read into adjacent frames that lie within one of them
/// becomes a `READ_FIXED`, which spares the kernel mapping the frames for
/// every read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// Start of the registered memory.
    pub base: usize,
    /// Its length in bytes.
    pub len: usize,
}

/// The most bytes one fixed buffer may cover (the kernel's limit is 1 GiB).
pub const FIXED_CHUNK: usize = 1 << 30;

impl Registered {
    /// The fixed buffer index holding all of `[ptr, ptr + len)`, if one
    /// does.
    fn index_of(&self, ptr: usize, len: usize) -> Option<u16> {
        let off = ptr.checked_sub(self.base)?;
        let end = off.checked_add(len)?;
        if end > self.len || len == 0 {
            return None;
        }
        let index = off / FIXED_CHUNK;
        ((end - 1) / FIXED_CHUNK == index)
            .then(|| u16::try_from(index).ok())
            .flatten()
    }
}

/// Which SQE a read became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// One `READ` into adjacent frames.
    Single,
    /// One `READ_FIXED` into adjacent frames of a registered pool
    /// ([`Registered`]).
    Fixed,
    /// One `READV`, a buffer per frame.
    Vectored,
    /// One `READ` into an aligned bounce buffer, then a copy.
    Bounced,
}

impl ReadOp {
    /// Builds the read of `req.len_bytes()` bytes at `req.offset()` of
    /// `file` into `req`'s frames: the op, and the SQE (its `user_data` is
    /// 0; set your own). The SQE points into the op's heap data and the
    /// request's frames: whoever pushes it to a ring must keep the op alive
    /// until the read's CQE, then call [`finish`](Self::finish) (or drop the
    /// op, which cancels the request).
    pub fn new(file: &UringFile, req: ReadRequest) -> (ReadOp, squeue::Entry) {
        Self::with_registered(file, req, None)
    }

    /// As [`new`](Self::new), for a ring with `registered` memory: a read
    /// into adjacent frames within it becomes a `READ_FIXED`. The caller
    /// must pass `Some` only if the ring it pushes the SQE to has exactly
    /// that memory registered, from index 0, and keeps it registered (and
    /// allocated) until the read's CQE; the kernel checks that the range
    /// lies within the buffer it names, and fails the read (`EFAULT`) if
    /// not.
    pub fn with_registered(
        file: &UringFile,
        mut req: ReadRequest,
        registered: Option<Registered>,
    ) -> (ReadOp, squeue::Entry) {
        let fd = types::Fd(file.inner.fd());
        let offset = req.offset();
        let len = req.len_bytes();
        let align = file.inner.align;
        let op = |req, iovecs, bounce, kind| ReadOp {
            req,
            _file: file.clone(),
            _iovecs: iovecs,
            bounce,
            kind,
        };
        if align > 1 && (offset % align as u64 != 0 || len % align != 0) {
            // Misaligned O_DIRECT read: read the enclosing aligned range, at
            // most `MAX_BOUNCE` of it (the rest is the short read's
            // remainder).
            let len = len.min(MAX_BOUNCE);
            let head = (offset % align as u64) as usize;
            let span = (head + len).div_ceil(align) * align;
            let mem_align = FRAME_ALIGN.max(align);
            let mut buf = vec![0u8; span + mem_align];
            let start = buf.as_ptr().align_offset(mem_align);
            let ptr = buf[start..].as_mut_ptr();
            // Invariant 2: `buf`'s heap allocation moves into the op with
            // the `Vec` and stays put; `start + span <= buf.len()`.
            let sqe = opcode::Read::new(fd, ptr, span.min(MAX_READ) as u32)
                .offset(offset - head as u64)
                .build();
            let bounce = Bounce {
                buf,
                start,
                head,
                want: len,
            };
            return (op(req, Vec::new(), Some(bounce), Kind::Bounced), sqe);
        }
        // Invariant 1: these pointers stay valid and ours until `req` is
        // completed or dropped, and `req` moves into the op.
        let bufs = req.raw_buffers();
        let contiguous = bufs
            .windows(2)
            .all(|w| w[0].0.wrapping_add(w[0].1) == w[1].0);
        if contiguous {
            let ptr = bufs.first().map_or(std::ptr::null_mut(), |b| b.0);
            let len = len.min(MAX_READ);
            if let Some(index) = registered.and_then(|r| r.index_of(ptr as usize, len)) {
                // Invariant 1 as for `READ`; the range lies within fixed
                // buffer `index` (the caller keeps it registered).
                let sqe = opcode::ReadFixed::new(fd, ptr, len as u32, index)
                    .offset(offset)
                    .build();
                return (op(req, Vec::new(), None, Kind::Fixed), sqe);
            }
            let sqe = opcode::Read::new(fd, ptr, len as u32)
                .offset(offset)
                .build();
            return (op(req, Vec::new(), None, Kind::Single), sqe);
        }
        let iovecs: Vec<libc::iovec> = bufs
            .iter()
            .map(|&(p, l)| libc::iovec {
                iov_base: p.cast(),
                iov_len: l,
            })
            .collect();
        // Invariant 2: the array's heap buffer moves into the op.
        let sqe = opcode::Readv::new(fd, iovecs.as_ptr(), iovecs.len() as u32)
            .offset(offset)
            .build();
        (op(req, iovecs, None, Kind::Vectored), sqe)
    }

    /// Which SQE the read became.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The file read from (to issue a short read's remainder).
    pub fn file(&self) -> &UringFile {
        &self._file
    }

    /// The request back, for an op whose SQE never reached a ring (the
    /// kernel holds no pointer into it). Complete it with an error or drop
    /// it.
    pub fn into_request(self) -> ReadRequest {
        self.req
    }

    /// Turns the read's CQE result (bytes read, or `-errno`) into the result
    /// to report and the request to report it to
    /// ([`ReadRequest::complete`]), copying out of a bounce buffer. Call it
    /// only once the CQE is in: the kernel is then done with every pointer
    /// in the SQE.
    pub fn finish(self, cqe_result: i32) -> (io::Result<usize>, ReadRequest) {
        let mut req = self.req;
        if cqe_result < 0 {
            return (Err(io::Error::from_raw_os_error(-cqe_result)), req);
        }
        let n = cqe_result as usize;
        match self.bounce {
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

#[cfg(test)]
mod tests {
    use super::{Registered, FIXED_CHUNK};

    #[test]
    fn a_fixed_read_lies_within_one_registered_buffer() {
        let base = 1 << 40;
        let r = Registered {
            base,
            len: 2 * FIXED_CHUNK + 8192,
        };
        assert_eq!(r.index_of(base, 8192), Some(0));
        assert_eq!(r.index_of(base + FIXED_CHUNK - 8192, 8192), Some(0));
        assert_eq!(r.index_of(base + FIXED_CHUNK, 8192), Some(1));
        assert_eq!(r.index_of(base + 2 * FIXED_CHUNK, 8192), Some(2));
        // Across a buffer boundary, past the end, before the start, empty.
        assert_eq!(r.index_of(base + FIXED_CHUNK - 4096, 8192), None);
        assert_eq!(r.index_of(base + 2 * FIXED_CHUNK + 4096, 8192), None);
        assert_eq!(r.index_of(base - 8192, 8192), None);
        assert_eq!(r.index_of(base, 0), None);
        assert_eq!(r.index_of(usize::MAX - 10, 8192), None);
    }
}
