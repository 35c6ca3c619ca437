//! The few system calls std does not wrap.

use std::io;

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
