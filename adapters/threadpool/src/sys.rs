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

/// Moves the calling thread to `SCHED_IDLE`: it then runs only on CPU time
/// no normal thread wants.
pub(crate) fn set_idle_priority() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` on our stack, read by the
    // kernel during the call only; pid 0 names the calling thread.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Gives the calling thread the CPU affinity of the process's main thread
/// (the mask `sched_getaffinity(getpid())` reports), instead of the one it
/// inherited from the thread that created it. Fails (harmlessly) if the
/// mask does not fit in a `cpu_set_t` (more than 1024 CPUs).
pub(crate) fn set_process_affinity() -> io::Result<()> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // `cpu_set_t` is a plain bit array: all zeroes is a valid (empty) set.
    let mut set = std::mem::MaybeUninit::<libc::cpu_set_t>::zeroed();
    // SAFETY: `set` points to `size` writable bytes (one zeroed
    // `cpu_set_t`), which is the length passed; the kernel writes at most
    // that many bytes and reads nothing from it. `getpid` has no
    // preconditions.
    let r = unsafe { libc::sched_getaffinity(libc::getpid(), size, set.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `set` was zero-initialised (a valid `cpu_set_t`) and then
    // possibly overwritten by the kernel with mask bits; every bit pattern
    // is a valid `cpu_set_t`.
    let set = unsafe { set.assume_init() };
    // SAFETY: `&set` points to one initialised `cpu_set_t` of `size`
    // bytes, only read by the kernel during the call; pid 0 names the
    // calling thread.
    let r = unsafe { libc::sched_setaffinity(0, size, &set) };
    if r != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Linux native AIO (`io_setup`/`io_submit`/`io_getevents`), used for
/// O_DIRECT reads: the kernel queues them at the device without a thread
/// per read. Only `IOCB_CMD_PREADV` is used.
pub(crate) mod aio {
    use std::io;
    use std::time::Duration;

    /// `IOCB_CMD_PREADV` of `<linux/aio_abi.h>`.
    const IOCB_CMD_PREADV: u16 = 7;

    /// `struct iocb` of `<linux/aio_abi.h>` (the kernel ABI; `aio_key` and
    /// `aio_rw_flags` swap places on big-endian machines).
    #[repr(C)]
    #[derive(Default)]
    struct Iocb {
        aio_data: u64,
        #[cfg(target_endian = "little")]
        aio_key: u32,
        aio_rw_flags: i32,
        #[cfg(target_endian = "big")]
        aio_key: u32,
        aio_lio_opcode: u16,
        aio_reqprio: i16,
        aio_fildes: u32,
        aio_buf: u64,
        aio_nbytes: u64,
        aio_offset: i64,
        aio_reserved2: u64,
        aio_flags: u32,
        aio_resfd: u32,
    }

    /// `struct io_event` of `<linux/aio_abi.h>`.
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub(crate) struct IoEvent {
        /// The submitter's `aio_data`.
        pub(crate) data: u64,
        obj: u64,
        /// Bytes read, or `-errno`.
        pub(crate) res: i64,
        res2: i64,
    }

    /// An AIO context (`aio_context_t`); destroyed on drop, which waits for
    /// (or cancels) any read still in it, so the owner drops it only once
    /// every submitted read has been reaped.
    #[derive(Debug)]
    pub(crate) struct Context(libc::c_ulong);

    impl Context {
        /// `io_setup(nr_events)`.
        pub(crate) fn new(nr_events: u32) -> io::Result<Context> {
            let mut ctx: libc::c_ulong = 0;
            // SAFETY: `ctx` is a valid, zeroed `aio_context_t` the kernel
            // writes the new context id into.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_setup,
                    nr_events as libc::c_long,
                    &mut ctx as *mut libc::c_ulong,
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(Context(ctx))
        }

        /// Submits one vectored read of `fd` at `offset` into `iov`, tagged
        /// `data` (returned in its [`IoEvent`]), with `rw_flags`
        /// (`RWF_NOWAIT`, …).
        ///
        /// # Safety
        ///
        /// On `Ok`, the kernel writes into the memory `iov` describes until
        /// the read's event is returned by [`Context::get_events`]: the
        /// caller must keep that memory valid and untouched by anyone else
        /// until then. The `iov` array itself is only read during the call.
        pub(crate) unsafe fn submit_preadv(
            &self,
            fd: i32,
            iov: &[libc::iovec],
            offset: u64,
            rw_flags: i32,
            data: u64,
        ) -> io::Result<()> {
            let offset = i64::try_from(offset).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "read offset past i64::MAX")
            })?;
            let fd = u32::try_from(fd)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "negative fd"))?;
            let cb = Iocb {
                aio_data: data,
                aio_rw_flags: rw_flags,
                aio_lio_opcode: IOCB_CMD_PREADV,
                aio_fildes: fd,
                aio_buf: iov.as_ptr() as u64,
                aio_nbytes: iov.len() as u64,
                aio_offset: offset,
                ..Iocb::default()
            };
            let mut cbs = [&cb as *const Iocb];
            // SAFETY: `cbs` holds one pointer to a valid `struct iocb`, which
            // (with the iovec array it points to) the kernel copies during
            // the call; the memory the iovecs describe stays valid until the
            // event is reaped, as this function's contract requires.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.0,
                    1 as libc::c_long,
                    cbs.as_mut_ptr(),
                )
            };
            match r {
                1 => Ok(()),
                r if r < 0 => Err(io::Error::last_os_error()),
                // 0 submitted without an error: treat as "try later".
                _ => Err(io::Error::from_raw_os_error(libc::EAGAIN)),
            }
        }

        /// Waits up to `timeout` for at least one event; fills `events` with
        /// up to its length and returns how many it filled (0 on timeout).
        pub(crate) fn get_events(
            &self,
            events: &mut [IoEvent],
            timeout: Duration,
        ) -> io::Result<usize> {
            let ts = libc::timespec {
                tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: timeout.subsec_nanos() as libc::c_long,
            };
            let max = events.len().min(i32::MAX as usize) as libc::c_long;
            // SAFETY: `events` is valid for writes of `max` `struct
            // io_event`s (`IoEvent` is its exact layout) and `ts` is a valid
            // timespec; the kernel writes at most `max` events.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.0,
                    1 as libc::c_long,
                    max,
                    events.as_mut_ptr(),
                    &ts as *const libc::timespec,
                )
            };
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(r as usize)
            }
        }
    }

    impl Drop for Context {
        fn drop(&mut self) {
            // SAFETY: `self.0` is a context from io_setup, destroyed once.
            unsafe { libc::syscall(libc::SYS_io_destroy, self.0) };
        }
    }
}
