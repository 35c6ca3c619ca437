//! O_DIRECT reads through Linux native AIO.

use super::threads::Job;
use super::threads::{lock, THREAD_STACK};
use super::{contain_panic, Shared};
use crate::file::FileInner;
use crate::sync::{spawn, Arc, AtomicUsize, PoisonError};
use crate::sys;
use pagestream::ReadRequest;
use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long the AIO reaper waits for a completion before it looks whether
/// the engine was dropped.
pub(super) const AIO_IDLE_POLL: Duration = Duration::from_millis(200);

/// Whether an engine has its AIO context.
pub(super) enum AioSlot {
    /// Not made yet.
    Untried,
    /// Made, with its reaper running.
    Ready(Arc<Aio>),
    /// Could not be made (see [`EngineStats::aio_unavailable`](crate::EngineStats::aio_unavailable)); not
    /// tried again.
    Failed,
}

/// An engine's AIO context. The reaper thread holds it (and the `Shared`)
/// until the engine is dropped and no AIO read is in flight.
pub(super) struct Aio {
    pub(super) ctx: sys::aio::Context,
    /// Reads submitted and not yet reaped.
    pub(super) in_flight: AtomicUsize,
}

/// An O_DIRECT read in flight through AIO: boxed, its address is the AIO
/// tag, and the reaper takes it back.
pub(super) struct AioJob {
    pub(super) file: Arc<FileInner>,
    pub(super) req: ReadRequest,
}

/// Collects AIO completions and completes their requests, until the engine
/// is dropped and nothing is in flight.
pub(super) fn reaper(shared: Arc<Shared>, aio: Arc<Aio>) {
    let mut events = vec![sys::aio::IoEvent::default(); 64];
    loop {
        let n = match aio.ctx.get_events(&mut events, AIO_IDLE_POLL) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(_) => {
                // Cannot happen with a valid context and buffer; do not
                // spin on it, and keep collecting what is in flight.
                std::thread::sleep(AIO_IDLE_POLL);
                0
            }
        };
        for ev in &events[..n] {
            aio.in_flight.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: every event's tag is a pointer from `Box::into_raw` in
            // `start_aio` for a read the kernel accepted; the kernel returns
            // each accepted read's event exactly once, and it has stopped
            // writing the read's frames by then.
            let job = unsafe { Box::from_raw(ev.data as *mut AioJob) };
            let res = ev.res;
            // As on the I/O threads, a panic in a filter or hook drops the
            // request (cancelling it) and the reaper goes on.
            contain_panic(|| aio_done(&shared, *job, res));
        }
        if n == 0 && aio.in_flight.load(Ordering::Acquire) == 0 && lock(&shared.state).shutdown {
            return;
        }
    }
}

/// Finishes an AIO read that returned `res` (bytes, or `-errno`).
pub(super) fn aio_done(shared: &Arc<Shared>, job: AioJob, res: i64) {
    let AioJob { file, req } = job;
    let r = if res >= 0 {
        Ok(res as usize)
    } else {
        let errno = i32::try_from(-res).unwrap_or(libc::EIO);
        if errno == libc::EAGAIN || errno == libc::EINTR || errno == libc::EOPNOTSUPP {
            // It would have blocked after all, or (EOPNOTSUPP) the device
            // takes no `RWF_NOWAIT` reads, so every AIO read would end so:
            // a thread reads it, and AIO is switched off for the latter.
            if errno == libc::EOPNOTSUPP {
                shared.aio_unavailable(&io::Error::from_raw_os_error(errno));
            }
            shared
                .counters
                .aio_fallbacks
                .fetch_add(1, Ordering::Relaxed);
            Shared::submit(
                shared,
                Job {
                    file,
                    req,
                    primed: false,
                },
            );
            return;
        }
        Err(io::Error::from_raw_os_error(errno))
    };
    if let Some(rest) = req.complete(r) {
        // A short read's remainder starts inside a block: the threads
        // read it (with a bounce buffer).
        Shared::submit(
            shared,
            Job {
                file,
                req: rest,
                primed: false,
            },
        );
    }
}

impl Shared {
    /// Switches AIO off for good because of `err`, recorded for
    /// [`EngineStats::aio_unavailable`](crate::EngineStats::aio_unavailable) (the first such error is kept).
    /// Reads keep going, on the I/O threads.
    pub(super) fn aio_unavailable(&self, err: &io::Error) {
        let errno = err.raw_os_error().filter(|&e| e != 0).unwrap_or(libc::EIO);
        let _ =
            self.aio_unavailable
                .compare_exchange(0, errno, Ordering::Relaxed, Ordering::Relaxed);
        self.aio_on.store(false, Ordering::Relaxed);
    }

    /// The engine's AIO context, made (with its reaper) on first use.
    /// `None` if it cannot be made: AIO is then switched off (and not
    /// tried again), and the caller reads on the I/O threads.
    pub(super) fn aio(this: &Arc<Self>) -> Option<Arc<Aio>> {
        let mut g = this.aio.lock().unwrap_or_else(PoisonError::into_inner);
        match &*g {
            AioSlot::Ready(a) => return Some(Arc::clone(a)),
            AioSlot::Failed => return None,
            AioSlot::Untried => {}
        }
        let aio = match sys::aio::Context::new(this.aio_events) {
            Ok(ctx) => Arc::new(Aio {
                ctx,
                in_flight: AtomicUsize::new(0),
            }),
            Err(e) => {
                *g = AioSlot::Failed;
                this.aio_unavailable(&e);
                return None;
            }
        };
        let (shared, reaper_aio) = (Arc::clone(this), Arc::clone(&aio));
        let spawned = spawn(format!("{}-aio", this.name), THREAD_STACK, move || {
            reaper(shared, reaper_aio)
        });
        if let Err(e) = spawned {
            // Nothing could complete AIO reads: do not submit any. (No
            // read is in the context, so dropping it here is safe.)
            *g = AioSlot::Failed;
            this.aio_unavailable(&e);
            return None;
        }
        *g = AioSlot::Ready(Arc::clone(&aio));
        Some(aio)
    }

    /// Submits the O_DIRECT read `req` with AIO. Returns it back when AIO
    /// cannot take it (the caller hands it to the threads).
    pub(super) fn start_aio(
        this: &Arc<Self>,
        file: &Arc<FileInner>,
        mut req: ReadRequest,
    ) -> Option<ReadRequest> {
        let (a, m) = (file.align as u64, file.mem_align);
        if req.block_size() as u64 % a != 0
            || req.offset() % a != 0
            || req.len_bytes() as u64 % a != 0
        {
            return Some(req); // the threads report it or bounce it
        }
        let iov: Vec<libc::iovec> = req
            .raw_buffers()
            .into_iter()
            .map(|(ptr, len)| libc::iovec {
                iov_base: ptr.cast(),
                iov_len: len,
            })
            .collect();
        if iov.len() > 1024 || iov.iter().any(|v| v.iov_base as usize % m != 0) {
            return Some(req);
        }
        let Some(aio) = Shared::aio(this) else {
            // No AIO context: the threads read it (never cancel a read the
            // engine can do).
            this.counters.aio_fallbacks.fetch_add(1, Ordering::Relaxed);
            return Some(req);
        };
        let offset = req.offset();
        let fd = file.fd();
        let job = Box::into_raw(Box::new(AioJob {
            file: Arc::clone(file),
            req,
        }));
        aio.in_flight.fetch_add(1, Ordering::AcqRel);
        // SAFETY: `iov` describes the frames `req` owns (`raw_buffers`: valid
        // and this request's alone until it is completed or dropped). The
        // request now lives in the leaked box `job`, which only the reaper
        // takes back, after the kernel has returned this read's event, so
        // the frames stay owned, valid and untouched while the kernel
        // writes them.
        let r = unsafe {
            aio.ctx
                .submit_preadv(fd, &iov, offset, libc::RWF_NOWAIT, job as u64)
        };
        match r {
            Ok(()) => {
                this.counters.aio_reads.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => {
                aio.in_flight.fetch_sub(1, Ordering::AcqRel);
                // SAFETY: the submission failed, so the kernel never saw
                // `job`: this is its only owner, and it came from
                // `Box::into_raw` above.
                let job = unsafe { Box::from_raw(job) };
                match e.raw_os_error() {
                    // The context is full (or the kernel short of memory
                    // for the moment), or a signal: only this read goes
                    // to the threads. `io_submit` of one iocb cannot be
                    // partial; 0 submitted comes back as EAGAIN.
                    Some(libc::EAGAIN) | Some(libc::EINTR) => {}
                    // No AIO for this kind of file or kernel: stop trying.
                    _ => this.aio_unavailable(&e),
                }
                this.counters.aio_fallbacks.fetch_add(1, Ordering::Relaxed);
                Some(job.req)
            }
        }
    }
}
