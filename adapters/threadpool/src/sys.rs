//! Thin, checked wrappers around the system calls the engine uses. Every
//! `unsafe` block of the crate that talks to the kernel lives here.

use std::io::{self, IoSliceMut};
use std::os::fd::RawFd;

/// Most iovecs one `preadv` takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// One `preadv2(fd, bufs, offset, flags)` straight into `bufs` (at most
/// `IOV_MAX` of them; the rest is left for a short read's remainder).
/// `flags == 0` is a plain `preadv`.
pub(crate) fn preadv2(
    fd: RawFd,
    bufs: &mut [IoSliceMut<'_>],
    offset: u64,
    flags: libc::c_int,
) -> io::Result<usize> {
    let off = libc::off_t::try_from(offset).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("read offset {offset} does not fit in off_t"),
        )
    })?;
    let n = bufs.len().min(IOV_MAX);
    // `n <= IOV_MAX`, which fits in a c_int.
    let cnt = n as libc::c_int;
    let iov = bufs.as_mut_ptr().cast::<libc::iovec>();
    let r = if flags == 0 {
        // SAFETY: `IoSliceMut` is guaranteed ABI-compatible with `struct
        // iovec` on Unix, so `iov` points to `n` valid iovecs; each describes
        // memory valid for writes and exclusively borrowed through `bufs`
        // for the duration of the call.
        unsafe { libc::preadv(fd, iov, cnt, off) }
    } else {
        // SAFETY: as above.
        unsafe { libc::preadv2(fd, iov, cnt, off, flags) }
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `fstat(fd)`.
pub(crate) fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is valid for writes of one `struct stat`; fstat fills it
    // entirely on success and we only read it then.
    let r = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it initialised `st`.
    Ok(unsafe { st.assume_init() })
}

/// The O_DIRECT `(file offset, memory)` alignments the kernel reports for
/// `fd` (`statx(STATX_DIOALIGN)`), or `None` when it reports none.
pub(crate) fn dio_align(fd: RawFd) -> Option<(u32, u32)> {
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: the path is a valid NUL-terminated empty string, used with
    // AT_EMPTY_PATH to mean `fd` itself; `stx` is valid for writes of one
    // `struct statx`.
    let r = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            stx.as_mut_ptr(),
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: zero-initialised and then (partly) filled by the kernel; every
    // field of `struct statx` is a plain integer, valid for any bits.
    let stx = unsafe { stx.assume_init() };
    (stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0)
        .then_some((stx.stx_dio_offset_align, stx.stx_dio_mem_align.max(1)))
}

/// `posix_fadvise(fd, offset, len, advice)`.
pub(crate) fn fadvise(fd: RawFd, offset: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    let off = libc::off_t::try_from(offset).unwrap_or(libc::off_t::MAX);
    let len = libc::off_t::try_from(len).unwrap_or(libc::off_t::MAX);
    // SAFETY: posix_fadvise takes no pointers; any fd/offset/len is allowed
    // (bad ones give an error code).
    let r = unsafe { libc::posix_fadvise(fd, off, len, advice) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}
