//! Thin, checked wrappers around the system calls the engine uses. Every
//! `unsafe` block of the crate that talks to the kernel lives here.

use std::io;
use std::os::fd::RawFd;

/// Most iovecs one `preadv` takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Destination memory of one read: `(pointer, length)` pairs in file order,
/// merged where adjacent in memory.
pub(crate) fn iovecs(bufs: &[(*mut u8, usize)]) -> Vec<libc::iovec> {
    let mut out: Vec<libc::iovec> = Vec::with_capacity(bufs.len());
    for &(ptr, len) in bufs {
        if let Some(last) = out.last_mut() {
            if (last.iov_base as usize).wrapping_add(last.iov_len) == ptr as usize {
                last.iov_len += len;
                continue;
            }
        }
        if out.len() == IOV_MAX {
            // The rest is read as a short read's remainder.
            break;
        }
        out.push(libc::iovec {
            iov_base: ptr.cast(),
            iov_len: len,
        });
    }
    out
}

/// One `preadv2(fd, iov, offset, flags)`. `flags == 0` is a plain `preadv`.
///
/// # Safety
///
/// Every iovec must describe memory that is valid for writes of its length
/// and that nothing else reads or writes until this call returns.
pub(crate) unsafe fn preadv2(
    fd: RawFd,
    iov: &[libc::iovec],
    offset: u64,
    flags: libc::c_int,
) -> io::Result<usize> {
    let off = libc::off_t::try_from(offset).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("read offset {offset} does not fit in off_t"),
        )
    })?;
    let cnt = libc::c_int::try_from(iov.len()).unwrap_or(libc::c_int::MAX);
    let r = if flags == 0 {
        // SAFETY: the caller guarantees every iovec is writable, exclusively
        // ours, for the duration of the call; `cnt <= iov.len()`.
        unsafe { libc::preadv(fd, iov.as_ptr(), cnt, off) }
    } else {
        // SAFETY: as above.
        unsafe { libc::preadv2(fd, iov.as_ptr(), cnt, off, flags) }
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

/// The O_DIRECT file-offset alignment the kernel reports for `fd`
/// (`statx(STATX_DIOALIGN)`), or `None` when it reports none.
pub(crate) fn dio_offset_align(fd: RawFd) -> Option<u32> {
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
        .then_some(stx.stx_dio_offset_align)
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
