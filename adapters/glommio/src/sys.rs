//! The few system calls std does not wrap.

use std::io;
use std::os::fd::RawFd;

/// `fstat(fd)`.
pub(crate) fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` points to writable memory for one `struct stat`, which is
    // all fstat writes; we read it only after fstat reports success.
    let r = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it initialised `st` entirely.
    Ok(unsafe { st.assume_init() })
}

/// The soft `RLIMIT_MEMLOCK` of this process, in bytes (`None`: unlimited).
pub(crate) fn memlock_limit() -> io::Result<Option<u64>> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable `struct rlimit`.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((rl.rlim_cur != libc::RLIM_INFINITY).then_some(rl.rlim_cur))
}
