//! [`ThreadPoolBuilder`](crate::ThreadPoolBuilder): the engine's settings.

use super::aio::AioSlot;
use super::cached::{Helper, HelperState, Sleep};
use super::stats::Counters;
use super::threads::State;
use super::{Handle, Shared, ThreadPoolEngine};
use crate::sync::{Arc, AtomicBool, Condvar, Mutex};
use pagestream::CachedReads;
use std::collections::VecDeque;
use std::sync::atomic::AtomicI32;

/// Default number of I/O threads: enough for a stream's default `max_ios`
/// (16) reads to block at once.
pub const DEFAULT_THREADS: usize = 16;

/// Default [`ThreadPoolBuilder::aio_events`](crate::ThreadPoolBuilder::aio_events).
pub const DEFAULT_AIO_EVENTS: u32 = 256;

/// Where a [`ThreadPoolEngine`](crate::ThreadPoolEngine) does reads that
/// would block: see [`ThreadPoolBuilder::blocking_reads`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BlockingReads {
    /// On the engine's I/O threads: the thread polling the stream never
    /// blocks on the device.
    #[default]
    Threads,
    /// On the thread that starts the read, with a blocking `preadv`: only
    /// for a thread that is yours alone, with `max_ios = 0`.
    CallingThread,
}

/// Builds a [`ThreadPoolEngine`](crate::ThreadPoolEngine); see [`ThreadPoolEngine::builder`](crate::ThreadPoolEngine::builder).
#[derive(Debug, Clone)]
#[must_use]
pub struct ThreadPoolBuilder {
    pub(super) threads: usize,
    pub(super) nowait: bool,
    pub(super) cached_depth: usize,
    pub(super) aio: bool,
    pub(super) aio_events: u32,
    pub(super) blocking_inline: bool,
    pub(super) name: String,
}

impl ThreadPoolBuilder {
    /// Most I/O threads (at least 1; default [`DEFAULT_THREADS`](crate::DEFAULT_THREADS)). Threads
    /// are started on demand, when more reads wait than threads are idle.
    /// Reads that block beyond this count queue.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// Try each buffered read inline with `preadv2(RWF_NOWAIT)` first, so a
    /// page-cache hit completes on the calling thread (default on). Turned
    /// off by itself if the kernel does not support it.
    pub fn nowait(mut self, on: bool) -> Self {
        self.nowait = on;
        self
    }

    /// Submit aligned O_DIRECT reads with Linux native AIO from the calling
    /// thread, with one reaper thread completing them, instead of one I/O
    /// thread per read (default on). Turned off by itself if the kernel
    /// has no AIO.
    ///
    /// Where the AIO context cannot be made (`io_setup` fails: `ENOSYS`
    /// where a seccomp filter or the kernel leaves AIO out, `EAGAIN` once
    /// the system-wide `fs.aio-max-nr` is used up), or the kernel refuses
    /// AIO reads outright, the engine reads O_DIRECT on its I/O threads
    /// instead, and [`EngineStats::aio_unavailable`](crate::EngineStats::aio_unavailable) says why.
    pub fn aio(mut self, on: bool) -> Self {
        self.aio = on;
        self
    }

    /// Events the engine's AIO context holds (at least 1; default
    /// [`DEFAULT_AIO_EVENTS`](crate::DEFAULT_AIO_EVENTS)): the most O_DIRECT reads in flight through
    /// AIO at once (more go to the I/O threads). The context reserves them
    /// against the system-wide `fs.aio-max-nr` (`/proc/sys/fs/aio-max-nr`)
    /// for the engine's life; asking for more than is left there makes
    /// AIO unavailable to the engine (see [`aio`](Self::aio)).
    pub fn aio_events(mut self, n: u32) -> Self {
        self.aio_events = n.max(1);
        self
    }

    /// Where reads that would block run (default
    /// [`BlockingReads::Threads`]). [`BlockingReads::CallingThread`] breaks the
    /// engine's promise not to block the thread that polls the stream, so
    /// use it only where that thread is yours alone (a stream driven by
    /// `futures::executor::block_on` on a dedicated thread, as a
    /// PostgreSQL backend does its synchronous I/O), never under a shared
    /// executor such as tokio, where it stalls every task on that thread
    /// for each device read. It saves the two thread hops a read otherwise
    /// costs, which is worth it with `max_ios = 0` (one read at a time,
    /// nothing to overlap); with deeper `max_ios` it serialises reads that
    /// the threads would overlap, so it loses. O_DIRECT reads that native
    /// AIO takes do not block either way (turn [`aio`](Self::aio) off too
    /// to read those inline).
    pub fn blocking_reads(mut self, on: BlockingReads) -> Self {
        self.blocking_inline = on == BlockingReads::CallingThread;
        self
    }

    /// Cached reads in flight per stream, and with them the cached-read
    /// helper (see [`ThreadPoolEngine`](crate::ThreadPoolEngine)):
    /// [`CachedReads::One`] turns the helper off and reads every cached
    /// read inline; [`CachedReads::InFlight`]`(n)` keeps `n` in flight for
    /// the helper and the stream to share (at most
    /// [`MAX_IOS`](pagestream::MAX_IOS), a larger value is taken as that;
    /// below 2 it is [`CachedReads::One`], as the helper takes a read only
    /// while two are queued). Default `InFlight(`[`DEFAULT_CACHED_DEPTH`](crate::DEFAULT_CACHED_DEPTH)`)`
    /// on a machine with more than one CPU, else `One`. Ignored with
    /// [`BlockingReads::CallingThread`].
    pub fn cached_reads(mut self, reads: CachedReads) -> Self {
        self.cached_depth = match reads {
            CachedReads::InFlight(n) => n.min(pagestream::MAX_IOS),
            _ => 0,
        };
        self
    }

    /// Name prefix of the engine's threads (default `"ps-io"`): the I/O
    /// threads are `PREFIX-0`, `PREFIX-1`, …, the AIO reaper `PREFIX-aio`
    /// and the cached-read helper `PREFIX-cached`. Linux keeps the first
    /// 15 bytes of a thread's name (`comm`), so a prefix of up to 8 bytes
    /// shows whole.
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Builds the engine. No thread starts before the first blocking read
    /// (or, for the cached-read helper, the first queued cached read).
    pub fn build(self) -> ThreadPoolEngine {
        ThreadPoolEngine {
            handle: Arc::new(Handle {
                shared: Arc::new(Shared {
                    state: Mutex::new(State {
                        jobs: VecDeque::new(),
                        idle: 0,
                        threads: 0,
                        primed_busy: 0,
                        shutdown: false,
                    }),
                    cond: Condvar::new(),
                    max_threads: self.threads,
                    name: self.name,
                    nowait: AtomicBool::new(self.nowait),
                    aio_on: AtomicBool::new(self.aio),
                    aio_events: self.aio_events,
                    aio_unavailable: AtomicI32::new(0),
                    blocking_inline: self.blocking_inline,
                    cached_depth: if self.blocking_inline || self.cached_depth < 2 {
                        0
                    } else {
                        self.cached_depth
                    },
                    helper: Helper {
                        state: Mutex::new(HelperState {
                            jobs: VecDeque::new(),
                            pushed: 0,
                            sleeping: Sleep::No,
                            started: false,
                            shutdown: false,
                        }),
                        cond: Condvar::new(),
                    },
                    aio: Mutex::new(AioSlot::Untried),
                    counters: Counters::default(),
                }),
            }),
        }
    }
}
