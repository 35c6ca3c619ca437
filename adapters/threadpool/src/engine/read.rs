//! One read attempt on the calling thread: `preadv2`, O_DIRECT bounce
//! buffers, the inline `RWF_NOWAIT` attempt.

use super::Shared;
use crate::file::FileInner;
use crate::sys;
use pagestream::ReadRequest;
use std::io::{self, IoSliceMut};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Reads as much of `req` as one `preadv2` gives, with `flags`.
pub(super) fn read_once(
    file: &FileInner,
    req: &mut ReadRequest,
    flags: libc::c_int,
) -> io::Result<usize> {
    let offset = req.offset();
    let len = req.len_bytes();
    let bs = req.block_size();
    if file.direct {
        let a = file.align;
        if bs % a != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "block size {bs} is not a multiple of the {a}-byte alignment O_DIRECT \
                     needs on this file; use a block size that is a multiple of {a}"
                ),
            ));
        }
        // A short read's remainder starts inside a block.
        if offset % a as u64 != 0 || len % a != 0 {
            return read_bounced(file, req, flags);
        }
    }
    let mut bufs = req.buffers_mut();
    if file.direct {
        let m = file.mem_align;
        if bufs.iter().any(|b| b.as_ptr() as usize % m != 0) {
            drop(bufs);
            return read_bounced(file, req, flags);
        }
    }
    sys::preadv2(file.fd(), &mut bufs, offset, flags)
}

/// Most bytes one bounced read covers (reads may be up to
/// `MAX_IO_COMBINE_LIMIT` blocks; a bounce need not allocate all of it).
const MAX_BOUNCE: usize = 1 << 20;

/// An O_DIRECT read whose remainder starts inside a block: reads the
/// enclosing aligned range into an aligned bounce buffer and copies the
/// requested bytes out.
pub(super) fn read_bounced(
    file: &FileInner,
    req: &mut ReadRequest,
    flags: libc::c_int,
) -> io::Result<usize> {
    let a = file.align;
    let m = file.mem_align.max(a);
    let offset = req.offset();
    // At most `MAX_BOUNCE` (the rest is the short read's remainder).
    let len = req.len_bytes().min(MAX_BOUNCE);
    let head = (offset % a as u64) as usize;
    let start = offset - head as u64;
    let span = (head + len).div_ceil(a) * a;
    let mut buf = vec![0u8; span + m];
    let pad = buf.as_ptr().align_offset(m);
    let aligned = &mut buf[pad..pad + span];
    let n = sys::preadv2(file.fd(), &mut [IoSliceMut::new(aligned)], start, flags)?;
    let useful = n.saturating_sub(head).min(len);
    Ok(req.copy_from(&aligned[head..head + useful]))
}

/// Tries `req` inline with `preadv2(RWF_NOWAIT)`: completes what the page
/// cache holds and returns what is left for a blocking read, if anything.
/// Records in `file.warm` whether the cache held all of it.
pub(super) fn read_nowait(
    shared: &Shared,
    file: &FileInner,
    mut req: ReadRequest,
) -> Option<ReadRequest> {
    let c = &shared.counters;
    let t = Instant::now();
    let r = read_once(file, &mut req, libc::RWF_NOWAIT);
    let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
    c.nowait_nanos.fetch_add(ns, Ordering::Relaxed);
    let full = matches!(r, Ok(n) if n == req.len_bytes());
    if file.warm.load(Ordering::Relaxed) != full {
        file.warm.store(full, Ordering::Relaxed);
    }
    match r {
        Ok(n) if full => {
            c.nowait_full.fetch_add(1, Ordering::Relaxed);
            req.set_served_from_cache(true);
            req.complete(Ok(n))
        }
        // Zero bytes: end of file, or nothing cached at the offset;
        // the blocking read tells which.
        Ok(0) => {
            c.nowait_would_block.fetch_add(1, Ordering::Relaxed);
            Some(req)
        }
        Ok(n) => {
            c.nowait_partial.fetch_add(1, Ordering::Relaxed);
            req.complete(Ok(n))
        }
        Err(e) => {
            match e.raw_os_error() {
                Some(libc::EAGAIN) => {
                    c.nowait_would_block.fetch_add(1, Ordering::Relaxed);
                }
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
                    shared.nowait.store(false, Ordering::Relaxed);
                }
                // Anything else: the blocking read reports it.
                _ => {}
            }
            Some(req)
        }
    }
}
