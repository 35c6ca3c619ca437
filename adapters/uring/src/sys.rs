//! The system calls std does not wrap: `statx(STATX_DIOALIGN)` and
//! `posix_fadvise`.

use std::os::fd::RawFd;

/// O_DIRECT alignment the kernel reports for `fd`: `(memory, file offset)`,
/// or `None` when it reports none (kernels before 6.1, some file systems).
pub(crate) fn dio_align(fd: RawFd) -> Option<(usize, usize)> {
    let mut stx = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: the path is a valid NUL-terminated empty string, which with
    // AT_EMPTY_PATH means `fd` itself; `stx` points to writable memory for
    // one `struct statx`, which is all the kernel writes.
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
    // SAFETY: zero-initialised, then partly filled by the kernel; every field
    // of `struct statx` is a plain integer, valid for any bit pattern.
    let stx = unsafe { stx.assume_init() };
    (stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0).then_some((
        stx.stx_dio_mem_align.max(1) as usize,
        stx.stx_dio_offset_align as usize,
    ))
}

/// `posix_fadvise(fd, 0, 0, advice)`: advice for the whole file.
pub(crate) fn fadvise_all(fd: RawFd, advice: libc::c_int) -> std::io::Result<()> {
    // SAFETY: posix_fadvise takes no pointers; any descriptor, range and
    // advice value is allowed (a bad one is reported as an error number).
    let r = unsafe { libc::posix_fadvise(fd, 0, 0, advice) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
}
