//! [`EngineStats`](crate::EngineStats): what the engine did, for reports.

use pagestream::EngineCounters;
use std::fmt;
use std::io;
use std::sync::atomic::AtomicU64;

/// Counters of what the engine did, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Reads completed whole by the inline `RWF_NOWAIT` attempt.
    pub nowait_full: u64,
    /// Inline attempts that read part of the request (the rest went to a thread).
    pub nowait_partial: u64,
    /// Inline attempts that would have blocked (`EAGAIN`).
    pub nowait_would_block: u64,
    /// Time spent in inline `RWF_NOWAIT` attempts (mostly copying from the
    /// page cache), in nanoseconds.
    pub nowait_nanos: u64,
    /// Requests (or remainders) handed to the I/O threads.
    pub queued: u64,
    /// Of `queued`, those that were primed (advised just before they were
    /// started, so the kernel was already reading them): they may queue
    /// for a thread busy with another primed read instead of starting one
    /// each (an idle thread is always woken for them).
    pub queued_primed: u64,
    /// Blocking `preadv` calls made by the I/O threads (or, with
    /// [`BlockingReads::CallingThread`](crate::BlockingReads::CallingThread), on the calling thread).
    pub thread_preads: u64,
    /// Reads done blocking on the calling thread
    /// ([`BlockingReads::CallingThread`](crate::BlockingReads::CallingThread)).
    pub inline_blocking_reads: u64,
    /// O_DIRECT reads submitted inline with native AIO.
    pub aio_reads: u64,
    /// O_DIRECT reads AIO did not take (it would have blocked, or the
    /// kernel refused it, or AIO is unavailable) that went to the I/O
    /// threads instead.
    pub aio_fallbacks: u64,
    /// Why native AIO is unavailable to this engine, if it is: the `errno`
    /// of the failure that switched it off (`io_setup` failing, such as
    /// `ENOSYS` under a seccomp filter or `EAGAIN` once `fs.aio-max-nr` is
    /// used up; the reaper thread not starting; the kernel refusing AIO
    /// reads or `RWF_NOWAIT` on them). Every O_DIRECT read is then read on
    /// the I/O threads; none is lost to it. `None` while AIO works, has not
    /// been tried, or was turned off with [`ThreadPoolBuilder::aio`](crate::ThreadPoolBuilder::aio).
    pub aio_unavailable: Option<i32>,
    /// I/O threads started.
    pub threads_started: u64,
    /// Cached reads queued for the helper thread (see the module docs).
    pub cached_queued: u64,
    /// Of those, reads the helper thread did (counted once done).
    pub helper_reads: u64,
    /// Of those, reads a stream did itself while it would have waited
    /// (counted once done).
    pub helped_reads: u64,
    /// Times the helper thread went to sleep.
    pub helper_sleeps: u64,
    /// Cached reads read inline instead of queued because the queue's lock
    /// was held at that moment (not counted in `cached_queued`).
    pub cached_contended: u64,
}

impl EngineStats {
    /// The counters by name, in the shape every engine shares.
    pub fn counters(&self) -> EngineCounters {
        EngineCounters(vec![
            ("nowait_full", self.nowait_full),
            ("nowait_partial", self.nowait_partial),
            ("nowait_would_block", self.nowait_would_block),
            ("nowait_nanos", self.nowait_nanos),
            ("queued", self.queued),
            ("queued_primed", self.queued_primed),
            ("thread_preads", self.thread_preads),
            ("inline_blocking_reads", self.inline_blocking_reads),
            ("cached_queued", self.cached_queued),
            ("helper_reads", self.helper_reads),
            ("helped_reads", self.helped_reads),
            ("helper_sleeps", self.helper_sleeps),
            ("aio_reads", self.aio_reads),
            ("aio_fallbacks", self.aio_fallbacks),
            ("threads_started", self.threads_started),
        ])
    }
}

/// One line per part of the engine: inline attempts, thread reads, AIO
/// (with why it is unavailable, if it is), the cached-read helper.
impl fmt::Display for EngineStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Inline RWF_NOWAIT: full={} partial={} would block={} ({:.3} ms)",
            self.nowait_full,
            self.nowait_partial,
            self.nowait_would_block,
            self.nowait_nanos as f64 / 1e6
        )?;
        writeln!(
            f,
            "Threads: queued={} (primed={}) preads={} inline blocking={} started={}",
            self.queued,
            self.queued_primed,
            self.thread_preads,
            self.inline_blocking_reads,
            self.threads_started
        )?;
        write!(
            f,
            "AIO: reads={} fallbacks={}",
            self.aio_reads, self.aio_fallbacks
        )?;
        if let Some(e) = self.aio_unavailable {
            write!(
                f,
                "  aio unavailable: {}, reads on threads",
                io::Error::from_raw_os_error(e)
            )?;
        }
        writeln!(f)?;
        write!(
            f,
            "Cached-read helper: queued={} helper={} helped={} sleeps={} contended={}",
            self.cached_queued,
            self.helper_reads,
            self.helped_reads,
            self.helper_sleeps,
            self.cached_contended
        )
    }
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) nowait_full: AtomicU64,
    pub(super) nowait_partial: AtomicU64,
    pub(super) nowait_would_block: AtomicU64,
    pub(super) nowait_nanos: AtomicU64,
    pub(super) queued: AtomicU64,
    pub(super) queued_primed: AtomicU64,
    pub(super) thread_preads: AtomicU64,
    pub(super) inline_blocking_reads: AtomicU64,
    pub(super) aio_reads: AtomicU64,
    pub(super) aio_fallbacks: AtomicU64,
    pub(super) threads_started: AtomicU64,
    pub(super) cached_queued: AtomicU64,
    pub(super) helper_reads: AtomicU64,
    pub(super) helped_reads: AtomicU64,
    pub(super) helper_sleeps: AtomicU64,
    pub(super) cached_contended: AtomicU64,
}
