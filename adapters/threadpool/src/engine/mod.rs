//! [`ThreadPoolEngine`]: blocking `preadv` on dedicated I/O threads, with an
//! inline `RWF_NOWAIT` attempt first so page-cache hits pay no thread hop.
//!
//! The engine's behaviour is documented on [`ThreadPoolEngine`]; each path a
//! read can take is a module here: [`aio`], [`cached`], [`read`], [`threads`].

mod aio;
mod builder;
mod cached;
mod read;
mod stats;
mod threads;

pub use builder::{BlockingReads, ThreadPoolBuilder, DEFAULT_AIO_EVENTS, DEFAULT_THREADS};
pub use cached::DEFAULT_CACHED_DEPTH;
pub use stats::EngineStats;

use aio::AioSlot;
use cached::{default_cached_depth, lock_helper, Helper};
use read::read_nowait;
use stats::Counters;
use threads::{lock, run, Job, State};

use crate::file::ThreadPoolFile;
use crate::sync::{Arc, AtomicBool, Condvar, Mutex};
use pagestream::{CachedReads, EngineHints, IoEngine, ReadRequest};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// An [`IoEngine`] that reads with blocking `preadv` on a pool of dedicated
/// I/O threads, so it works under any executor. Cheap to clone (an `Arc`
/// inside); clones share the threads. The threads exit once every clone is
/// dropped and the reads queued to them are done.
///
/// On buffered files each read is first tried inline with
/// `preadv2(RWF_NOWAIT)`: if the page cache holds all of it, it completes on
/// the calling thread and is reported as served from cache; what the cache
/// does not hold goes to the I/O threads. Once a file's reads are found
/// cached, its next reads are shared between the calling thread and a
/// helper thread instead (see [How a read is done](#how-a-read-is-done)).
///
/// ```no_run
/// use futures::{executor::block_on, StreamExt};
/// use pagestream::{source, BufferPool, ReadStream};
/// use pagestream_threadpool::{ThreadPoolEngine, ThreadPoolFile};
///
/// let pool = BufferPool::new(1024, 8192)?;
/// let engine = ThreadPoolEngine::new();
/// let file = ThreadPoolFile::open("table.dat")?;
/// let nblocks = file.as_file().metadata()?.len() / 8192;
/// let mut stream = ReadStream::builder(&pool, engine, file).build(source::forward(0..nblocks))?;
/// block_on(async {
///     while let Some(page) = stream.next().await {
///         let _first_byte = page?[0];
///     }
///     Ok::<_, std::io::Error>(())
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # How a read is done
///
/// A read takes the first of these paths that applies:
///
/// 1. **Native AIO**: an aligned O_DIRECT read is submitted inline
///    with `io_submit(RWF_NOWAIT)`, which never waits for the device; one
///    reaper thread per engine collects completions in batches
///    (`io_getevents`) and completes the requests there. An O_DIRECT read on
///    a thread would cost a thread wake to start and a context switch to
///    finish, both on the critical path. A read AIO cannot take (it would
///    block, a short read's remainder, an unaligned buffer, no AIO in the
///    kernel) falls through to the I/O threads.
/// 2. **The cached-read queue**: a buffered file whose last
///    inline attempt found its whole read cached is *warm*; its reads are
///    queued for a helper thread that copies them in parallel with the
///    consumer.
/// 3. **Inline `RWF_NOWAIT`**: what the page cache holds is
///    copied on the calling thread; the rest goes on.
/// 4. **The I/O threads**: a blocking `preadv` on a thread of
///    the pool, which completes the request there.
///
/// Priming and the helper only change which thread does a read and when,
/// never what it reads. The evidence behind each choice is in
/// `docs/engines.md`.
///
/// # Cached reads: the helper thread
///
/// A read served from the OS page cache is a copy. On a machine with a
/// second CPU the engine shares those copies with one helper thread, without
/// the consumer ever waiting for a thread that is asleep:
///
/// - The engine asks streams to keep [`cached_depth`] (several) full-sized reads in
///   flight while their reads are served from the cache
///   ([`EngineHints::cached_reads`]), so the queue holds several.
/// - The helper takes the **newest** queued read while at least two are
///   queued; the oldest is the one its stream wants first. A stream about to
///   wait for a read does the **oldest** queued read of its file itself
///   ([`IoEngine::help`]; never another file's, whose hooks would then run
///   in its poll), so it is never left waiting for a queued read. A lone read
///   the helper leaves for a millisecond it takes anyway, so a read whose
///   stream is not polled still completes. The helper sleeps when it has
///   nothing to take and is woken when two reads are queued (or one, into an
///   empty queue, to arm that linger): it never spins.
/// - The first read the cache does not hold whole makes the file cold
///   again; its remainder goes to the I/O threads.
/// - With one CPU, or [`cached_depth`] off, every cached read is done inline.
///
/// The helper runs at `SCHED_IDLE`, on CPU time nothing else wants, so that
/// beside a CPU-bound process it does not take time from the consumer it
/// helps. It takes the process's CPU affinity when it starts, not that of
/// the consumer whose read started it (a consumer pinned to one CPU would
/// otherwise pin its helper beside it).
///
/// **Known limitation: priority inversion under CPU contention.** A
/// `SCHED_IDLE` thread gets a tiny share of a busy CPU, so a helper
/// preempted at the wrong moment can hold up a normal-priority consumer for
/// much longer than its copy takes. Queueing a read never waits for the
/// queue's lock: if it is taken, the read is done inline instead
/// ([`EngineStats::cached_contended`]). Two waits remain: a stream about to
/// wait takes that lock to look for reads of its file (the helper holds it
/// only to pop a read or go to sleep, but may be preempted while it does),
/// and a read the helper has taken completes only when the helper next
/// runs. Neither is bounded while every CPU is busy with normal threads;
/// [`cached_depth`] off avoids both.
///
/// [`cached_depth`]: ThreadPoolBuilder::cached_reads
///
/// # Primed reads
///
/// A read the planner gave `POSIX_FADV_WILLNEED` advice for just before
/// starting it is *primed* ([`ReadRequest::is_advised`]): the kernel has
/// already been asked to read it, so the I/O thread that takes it only waits
/// for the page cache and copies. Such reads do not need a thread each:
/// while a thread is busy with a primed read, up to
/// 16 (a stream's default `max_ios`) primed reads
/// per such thread queue for it without starting another, which saves two
/// context switches per read. A queued read never waits while a thread is
/// idle (the idle thread is woken for it), nor behind threads busy only with
/// reads that are not primed, whose device reads (or files) may take any
/// time. Reads that are not primed (O_DIRECT, advice off, a read continuing
/// kernel read-ahead) get a thread each, as their thread is what submits
/// them to the device.
#[derive(Clone)]
pub struct ThreadPoolEngine {
    handle: Arc<Handle>,
}

/// Dropped when the last engine clone goes: tells the threads to exit.
struct Handle {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    cond: Condvar,
    max_threads: usize,
    name: String,
    nowait: AtomicBool,
    /// AIO for O_DIRECT reads wanted and not (yet) found unavailable.
    aio_on: AtomicBool,
    /// Events to ask `io_setup` for.
    aio_events: u32,
    /// The errno that made AIO unavailable; 0: none did.
    aio_unavailable: AtomicI32,
    /// Read on the calling thread instead of the I/O threads.
    blocking_inline: bool,
    /// Cached reads per stream in flight through the helper; 0: no helper.
    cached_depth: usize,
    /// The cached-read queue and its helper thread.
    helper: Helper,
    /// The AIO context and its reaper, made at the first O_DIRECT read.
    aio: Mutex<AioSlot>,
    counters: Counters,
}

impl Drop for Handle {
    fn drop(&mut self) {
        lock(&self.shared.state).shutdown = true;
        self.shared.cond.notify_all();
        lock_helper(&self.shared.helper.state).shutdown = true;
        self.shared.helper.cond.notify_all();
    }
}

impl fmt::Debug for ThreadPoolEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.handle.shared;
        f.debug_struct("ThreadPoolEngine")
            .field("max_threads", &s.max_threads)
            .field("nowait", &s.nowait.load(Ordering::Relaxed))
            .field("aio", &s.aio_on.load(Ordering::Relaxed))
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Default for ThreadPoolEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl ThreadPoolEngine {
    /// An engine with [`DEFAULT_THREADS`] threads and `RWF_NOWAIT` on.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Starts configuring an engine.
    pub fn builder() -> ThreadPoolBuilder {
        ThreadPoolBuilder {
            threads: DEFAULT_THREADS,
            nowait: true,
            cached_depth: default_cached_depth(),
            aio: true,
            aio_events: DEFAULT_AIO_EVENTS,
            blocking_inline: false,
            name: "ps-io".into(),
        }
    }

    /// Whether inline `RWF_NOWAIT` attempts are on (they switch off by
    /// themselves if the kernel rejects the flag).
    pub fn nowait(&self) -> bool {
        self.handle.shared.nowait.load(Ordering::Relaxed)
    }

    /// Whether aligned O_DIRECT reads go through native AIO (it switches
    /// off by itself if the kernel has none).
    pub fn aio(&self) -> bool {
        self.handle.shared.aio_on.load(Ordering::Relaxed)
    }

    /// Most I/O threads.
    pub fn max_threads(&self) -> usize {
        self.handle.shared.max_threads
    }

    /// What the engine has done so far (all clones together).
    pub fn stats(&self) -> EngineStats {
        let c = &self.handle.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EngineStats {
            nowait_full: l(&c.nowait_full),
            nowait_partial: l(&c.nowait_partial),
            nowait_would_block: l(&c.nowait_would_block),
            nowait_nanos: l(&c.nowait_nanos),
            queued: l(&c.queued),
            queued_primed: l(&c.queued_primed),
            thread_preads: l(&c.thread_preads),
            inline_blocking_reads: l(&c.inline_blocking_reads),
            aio_reads: l(&c.aio_reads),
            aio_fallbacks: l(&c.aio_fallbacks),
            aio_unavailable: match self.handle.shared.aio_unavailable.load(Ordering::Relaxed) {
                0 => None,
                e => Some(e),
            },
            threads_started: l(&c.threads_started),
            cached_queued: l(&c.cached_queued),
            helper_reads: l(&c.helper_reads),
            helped_reads: l(&c.helped_reads),
            helper_sleeps: l(&c.helper_sleeps),
            cached_contended: l(&c.cached_contended),
        }
    }
}
/// Runs `f`, and catches a panic out of it (a request's filter or hook):
/// nothing unwinds past this call. The panic's payload is user data whose
/// own drop may panic; it is dropped under a second catch, and what that
/// one catches is forgotten, so the caller's accounting after the call
/// (a thread's busy count, the reaper's loop) always runs.
fn contain_panic(f: impl FnOnce()) {
    if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
        if let Err(again) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
    }
}
impl IoEngine for ThreadPoolEngine {
    type File = ThreadPoolFile;

    fn start_read(&self, file: &ThreadPoolFile, mut req: ReadRequest) {
        let shared = &self.handle.shared;
        let inner = &file.inner;
        if inner.direct && shared.aio_on.load(Ordering::Relaxed) {
            match Shared::start_aio(shared, inner, req) {
                None => return,
                Some(r) => req = r,
            }
        }
        let primed = req.is_advised();
        if !inner.direct && shared.nowait.load(Ordering::Relaxed) {
            if shared.cached_depth > 0 && inner.warm.load(Ordering::Relaxed) {
                match Shared::queue_cached(
                    shared,
                    Job {
                        file: Arc::clone(inner),
                        req,
                        primed,
                    },
                ) {
                    None => return,
                    // The queue was busy: read inline, as without a helper.
                    Some(job) => req = job.req,
                }
            }
            match read_nowait(shared, inner, req) {
                None => return,
                Some(rest) => req = rest,
            }
        }
        let job = Job {
            file: Arc::clone(inner),
            req,
            primed,
        };
        if shared.blocking_inline {
            shared
                .counters
                .inline_blocking_reads
                .fetch_add(1, Ordering::Relaxed);
            run(shared, job);
            return;
        }
        Shared::submit(shared, job);
    }

    /// Buffered files take advice. With the cached-read helper on, a
    /// buffered file asks for [`ThreadPoolBuilder::cached_reads`] cached
    /// reads in flight and lets the stream help.
    fn hints(&self, file: &ThreadPoolFile) -> EngineHints {
        let shared = &self.handle.shared;
        let buffered = !file.inner.direct;
        let helper = buffered && shared.cached_depth > 0;
        EngineHints::new()
            .with_advice(buffered)
            .with_cached_reads(if helper {
                CachedReads::InFlight(shared.cached_depth)
            } else {
                CachedReads::One
            })
            .with_help(helper)
    }

    fn help(&self, file: &ThreadPoolFile) -> bool {
        let shared = &self.handle.shared;
        shared.cached_depth > 0 && Shared::help(shared, &file.inner)
    }

    /// `POSIX_FADV_WILLNEED` on buffered files. An error is ignored (advice
    /// is only a hint), and the read it announces is then not primed.
    fn advise(&self, file: &ThreadPoolFile, offset: u64, len: u64) -> bool {
        let inner = &file.inner;
        !inner.direct
            && len > 0
            && pagestream::os::fadvise(inner.fd(), offset, len, libc::POSIX_FADV_WILLNEED).is_ok()
    }

    fn name(&self) -> &'static str {
        "threadpool"
    }
}

#[cfg(all(test, pagestream_loom))]
mod loom_tests;

#[cfg(all(test, not(pagestream_loom)))]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::StreamExt;
    use pagestream::testing::{stamp, StampedFile};
    use pagestream::{source, BufferPool, EngineFile, FileId, ReadFilter, ReadStream};
    use std::io::{self, Read};
    use std::time::Duration;

    const BS: usize = 8192;

    fn warm(f: &StampedFile) {
        let mut buf = Vec::new();
        std::fs::File::open(f.path())
            .unwrap()
            .read_to_end(&mut buf)
            .unwrap();
    }

    /// An engine whose cached-read helper never starts (it is marked
    /// started): queued reads stay queued until a stream helps.
    fn engine_without_helper() -> ThreadPoolEngine {
        let e = ThreadPoolEngine::builder()
            .cached_reads(CachedReads::InFlight(6))
            .build();
        lock_helper(&e.handle.shared.helper.state).started = true;
        e
    }

    /// The files of the queued cached reads, oldest first.
    fn queued(e: &ThreadPoolEngine) -> Vec<FileId> {
        let st = lock_helper(&e.handle.shared.helper.state);
        st.jobs.iter().map(|j| j.file.id()).collect()
    }

    fn count(q: &[FileId], id: FileId) -> usize {
        q.iter().filter(|&&i| i == id).count()
    }

    /// Takes pages from `s` (checking them) until one of its reads is queued.
    fn until_queued<E: IoEngine>(
        s: &mut ReadStream<E, source::Forward>,
        engine: &ThreadPoolEngine,
        id: FileId,
        seed: u64,
    ) -> u64 {
        let mut next = 0;
        block_on(async {
            while count(&queued(engine), id) == 0 {
                let page = s.next().await.expect("a page").expect("ok");
                assert!(stamp::check(seed, page.block(), &page));
                next = page.block() + 1;
            }
        });
        next
    }

    fn finish<E: IoEngine>(
        s: &mut ReadStream<E, source::Forward>,
        seed: u64,
        mut next: u64,
        n: u64,
    ) {
        block_on(async {
            while let Some(page) = s.next().await {
                let page = page.expect("page");
                assert_eq!(page.block(), next);
                assert!(stamp::check(seed, next, &page), "block {next}");
                next += 1;
            }
        });
        assert_eq!(next, n);
    }

    #[test]
    fn help_does_only_reads_of_its_own_file() {
        let n = 512;
        let (fa, fb) = (
            StampedFile::with_seed("help-a", 21, n, BS),
            StampedFile::with_seed("help-b", 22, n, BS),
        );
        warm(&fa);
        warm(&fb);
        let engine = engine_without_helper();
        let pool = BufferPool::new(1024, BS).unwrap();
        let a = ThreadPoolFile::open(fa.path()).unwrap();
        let b = ThreadPoolFile::open(fb.path()).unwrap();
        let (ida, idb) = (a.id(), b.id());
        assert_ne!(ida, idb);
        let mut sa = ReadStream::builder(&pool, engine.clone(), a.clone())
            .build(source::forward(0..n))
            .unwrap();
        let mut sb = ReadStream::builder(&pool, engine.clone(), b.clone())
            .build(source::forward(0..n))
            .unwrap();
        let na = until_queued(&mut sa, &engine, ida, 21);
        // Only `a`'s reads are queued: helping `b` does nothing.
        let q = queued(&engine);
        assert!(count(&q, ida) > 0 && count(&q, idb) == 0, "{q:?}");
        assert!(!engine.help(&b));
        assert_eq!(queued(&engine), q);
        // With both queued (`a`'s oldest), helping `b` does `b`'s oldest.
        let nb = until_queued(&mut sb, &engine, idb, 22);
        let q = queued(&engine);
        assert_eq!(q[0], ida, "{q:?}");
        assert!(engine.help(&b));
        let q2 = queued(&engine);
        assert_eq!(count(&q2, ida), count(&q, ida), "{q:?} -> {q2:?}");
        assert_eq!(count(&q2, idb) + 1, count(&q, idb), "{q:?} -> {q2:?}");
        // Another handle of the same file is the same file.
        let a2 = ThreadPoolFile::open(fa.path()).unwrap();
        assert!(engine.help(&a2));
        assert_eq!(count(&queued(&engine), ida) + 1, count(&q, ida));
        finish(&mut sa, 21, na, n);
        finish(&mut sb, 22, nb, n);
        let es = engine.stats();
        assert_eq!(es.helper_reads, 0, "{es:?}");
        assert_eq!(es.cached_queued, es.helped_reads, "{es:?}");
    }

    /// Panics once, in the result filter of a read past block 64.
    struct PanicOnce(AtomicBool);

    impl ReadFilter for PanicOnce {
        fn filter(&self, req: &ReadRequest, r: io::Result<usize>) -> io::Result<usize> {
            if req.first_block() >= 64 && !self.0.swap(true, Ordering::SeqCst) {
                panic!("injected panic in a helped read (expected by the test)");
            }
            r
        }
    }

    #[derive(Clone)]
    struct Panicky(ThreadPoolEngine, Arc<PanicOnce>);

    #[deny(clippy::missing_trait_methods)]
    impl IoEngine for Panicky {
        type File = ThreadPoolFile;
        fn start_read(&self, file: &ThreadPoolFile, mut req: ReadRequest) {
            req.add_filter(Arc::clone(&self.1) as Arc<dyn ReadFilter>);
            self.0.start_read(file, req);
        }
        fn hints(&self, file: &ThreadPoolFile) -> EngineHints {
            self.0.hints(file)
        }
        fn advise(&self, file: &ThreadPoolFile, offset: u64, len: u64) -> bool {
            self.0.advise(file, offset, len)
        }
        fn help(&self, file: &ThreadPoolFile) -> bool {
            self.0.help(file)
        }
        fn name(&self) -> &'static str {
            "panicky"
        }
    }

    #[test]
    fn a_panic_in_a_helped_read_cancels_it_without_unwinding_into_the_stream() {
        let n = 512;
        let f = StampedFile::with_seed("help-panic", 23, n, BS);
        warm(&f);
        // No helper thread: every queued read is done by the stream's help.
        let inner = engine_without_helper();
        let once = Arc::new(PanicOnce(AtomicBool::new(false)));
        let engine = Panicky(inner.clone(), Arc::clone(&once));
        let pool = BufferPool::new(1024, BS).unwrap();
        let file = ThreadPoolFile::open(f.path()).unwrap();
        let mut s = ReadStream::builder(&pool, engine, file)
            .build(source::forward(0..n))
            .unwrap();
        finish(&mut s, 23, 0, n);
        let st = block_on(s.close());
        assert!(once.0.load(Ordering::SeqCst), "no panic injected");
        assert!(st.retries > 0, "cancelled read not retried: {st}");
        let es = inner.stats();
        assert!(es.helped_reads > 0, "{es:?}");
        assert_eq!(es.helper_reads, 0, "{es:?}");
    }

    /// Holds every read it filters on its I/O thread until opened; counts
    /// the reads that reached it.
    #[derive(Default)]
    struct Gate {
        /// `(open, reads that reached the gate)`.
        state: Mutex<(bool, usize)>,
        cond: Condvar,
    }

    impl Gate {
        fn open(&self) {
            self.state.lock().unwrap().0 = true;
            self.cond.notify_all();
        }

        /// Waits (at most 30 s) until `n` reads have reached the gate.
        fn wait_entered(&self, n: usize) {
            let st = self.state.lock().unwrap();
            let (st, _) = self
                .cond
                .wait_timeout_while(st, Duration::from_secs(30), |s| s.1 < n)
                .unwrap();
            assert!(st.1 >= n, "{} of {n} reads reached the gate", st.1);
        }
    }

    impl ReadFilter for Gate {
        fn filter(&self, _req: &ReadRequest, r: io::Result<usize>) -> io::Result<usize> {
            let mut st = self.state.lock().unwrap();
            st.1 += 1;
            self.cond.notify_all();
            while !st.0 {
                st = self.cond.wait(st).unwrap();
            }
            r
        }
    }

    /// Passes reads to the engine it wraps, each held by `gate` if set, and
    /// primed (advised right before it is started, as the planner does) if
    /// `prime`.
    #[derive(Clone)]
    struct Staged {
        inner: ThreadPoolEngine,
        gate: Option<Arc<Gate>>,
        prime: bool,
    }

    impl IoEngine for Staged {
        type File = ThreadPoolFile;
        fn start_read(&self, file: &ThreadPoolFile, mut req: ReadRequest) {
            if let Some(g) = &self.gate {
                req.add_filter(Arc::clone(g) as Arc<dyn ReadFilter>);
            }
            if self.prime {
                let taken = self
                    .inner
                    .advise(file, req.offset(), req.len_bytes() as u64);
                req.set_advised(taken);
            }
            self.inner.start_read(file, req);
        }
        fn name(&self) -> &'static str {
            "staged"
        }
    }

    /// An engine whose every read goes to its (at most two) I/O threads.
    fn two_thread_engine() -> ThreadPoolEngine {
        ThreadPoolEngine::builder()
            .threads(2)
            .nowait(false)
            .cached_reads(CachedReads::One)
            .aio(false)
            .build()
    }

    /// Reads block `block` of `f` through `engine` on a thread of its own;
    /// the receiver hears when the page is back and checked.
    fn read_block(
        engine: Staged,
        f: &StampedFile,
        seed: u64,
        block: u64,
    ) -> (std::sync::mpsc::Receiver<()>, std::thread::JoinHandle<()>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = f.path().to_owned();
        let t = std::thread::spawn(move || {
            let pool = BufferPool::new(8, BS).unwrap();
            let file = ThreadPoolFile::open(path).unwrap();
            let mut s = ReadStream::builder(&pool, engine, file)
                .build(source::forward(block..block + 1))
                .unwrap();
            block_on(async {
                let page = s.next().await.expect("a page").expect("ok");
                assert_eq!(page.block(), block);
                assert!(stamp::check(seed, block, &page), "block {block}");
                drop(page);
                assert!(s.next().await.is_none());
            });
            tx.send(()).unwrap();
        });
        (rx, t)
    }

    /// Waits (at most 30 s) until the engine's threads are as `want` says.
    fn wait_threads(e: &ThreadPoolEngine, want: impl Fn(&State) -> bool) {
        for _ in 0..3000 {
            if want(&lock(&e.handle.shared.state)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let st = lock(&e.handle.shared.state);
        panic!(
            "threads: {} alive, {} idle, {} jobs queued",
            st.threads,
            st.idle,
            st.jobs.len()
        );
    }

    const WAIT: Duration = Duration::from_secs(30);

    /// `engine` wrapped, its reads held at `gate` if given, primed if
    /// `prime`.
    fn staged(engine: &ThreadPoolEngine, gate: Option<&Arc<Gate>>, prime: bool) -> Staged {
        Staged {
            inner: engine.clone(),
            gate: gate.cloned(),
            prime,
        }
    }

    /// Holds one of `engine`'s threads inside a read of block 0 of `f`
    /// (primed if `prime`) until the returned gate opens; the receiver
    /// hears when that read is back.
    fn hold_a_thread(
        engine: &ThreadPoolEngine,
        f: &StampedFile,
        seed: u64,
        prime: bool,
    ) -> (
        Arc<Gate>,
        std::sync::mpsc::Receiver<()>,
        std::thread::JoinHandle<()>,
    ) {
        let gate = Arc::new(Gate::default());
        let (held, t) = read_block(staged(engine, Some(&gate), prime), f, seed, 0);
        gate.wait_entered(1);
        (gate, held, t)
    }

    #[test]
    fn a_primed_read_is_taken_by_an_idle_thread_not_queued_behind_a_blocked_one() {
        let f = StampedFile::with_seed("primed-idle", 31, 4, BS);
        let engine = two_thread_engine();
        // Thread one is held inside a read.
        let (gate, held, ta) = hold_a_thread(&engine, &f, 31, false);
        // A second read starts thread two, which then idles.
        let (rx, tb) = read_block(staged(&engine, None, false), &f, 31, 1);
        rx.recv_timeout(WAIT).expect("the second read completed");
        tb.join().unwrap();
        wait_threads(&engine, |st| st.threads == 2 && st.idle == 1);
        // A primed read now: the idle thread takes it while thread one is
        // still held.
        let (rx, tc) = read_block(staged(&engine, None, true), &f, 31, 2);
        let done = rx.recv_timeout(WAIT);
        let es = engine.stats();
        gate.open();
        held.recv_timeout(WAIT).expect("the held read completed");
        ta.join().unwrap();
        tc.join().unwrap();
        assert!(
            done.is_ok(),
            "the primed read waited for the held thread while another idled: {es:?}"
        );
        assert_eq!(es.queued_primed, 1, "{es:?}");
        assert_eq!(es.threads_started, 2, "{es:?}");
    }

    #[test]
    fn a_primed_read_does_not_wait_behind_a_thread_on_an_unprimed_read() {
        let f = StampedFile::with_seed("primed-unprimed", 32, 4, BS);
        let engine = two_thread_engine();
        let (gate, held, ta) = hold_a_thread(&engine, &f, 32, false);
        // The only thread is held in a read that is not primed; the pool
        // has room for a second, which takes the primed read.
        let (rx, tc) = read_block(staged(&engine, None, true), &f, 32, 2);
        let done = rx.recv_timeout(WAIT);
        let es = engine.stats();
        gate.open();
        held.recv_timeout(WAIT).expect("the held read completed");
        ta.join().unwrap();
        tc.join().unwrap();
        assert!(
            done.is_ok(),
            "the primed read waited for a thread held in an unprimed read: {es:?}"
        );
        assert_eq!(es.queued_primed, 1, "{es:?}");
        assert_eq!(es.threads_started, 2, "{es:?}");
    }

    #[test]
    fn a_primed_read_queues_behind_a_thread_on_a_primed_read() {
        // What priming is for: no thread is started for a primed read
        // while the busy thread is on a primed read itself.
        let f = StampedFile::with_seed("primed-primed", 33, 4, BS);
        let engine = two_thread_engine();
        let (gate, held, ta) = hold_a_thread(&engine, &f, 33, true);
        let (rx, tc) = read_block(staged(&engine, None, true), &f, 33, 2);
        // Once the second read is queued, it is still waiting for the one
        // thread.
        wait_threads(&engine, |st| !st.jobs.is_empty());
        let es = engine.stats();
        {
            let st = lock(&engine.handle.shared.state);
            assert_eq!((st.threads, st.jobs.len()), (1, 1), "{es:?}");
        }
        gate.open();
        held.recv_timeout(WAIT).expect("the held read completed");
        rx.recv_timeout(WAIT).expect("the queued read completed");
        ta.join().unwrap();
        tc.join().unwrap();
        let es = engine.stats();
        assert_eq!(es.queued_primed, 2, "{es:?}");
        assert_eq!(es.threads_started, 1, "{es:?}");
    }

    /// Queues cached reads like the engine it wraps, but never helps (the
    /// stream's `help` takes the queue's lock, which the test holds).
    #[derive(Clone)]
    struct NoHelp(ThreadPoolEngine);

    impl IoEngine for NoHelp {
        type File = ThreadPoolFile;
        fn start_read(&self, file: &ThreadPoolFile, req: ReadRequest) {
            self.0.start_read(file, req);
        }
        /// The inner engine's hints, without help.
        fn hints(&self, file: &ThreadPoolFile) -> EngineHints {
            self.0.hints(file).with_help(false)
        }
        fn name(&self) -> &'static str {
            "nohelp"
        }
    }

    #[test]
    fn a_busy_queue_lock_sends_cached_reads_inline() {
        let n = 256;
        let f = StampedFile::with_seed("help-busy", 24, n, BS);
        warm(&f);
        let engine = engine_without_helper();
        // Hold the queue's lock (as a preempted helper might) for the whole
        // scan: every read is done inline instead of waiting for it.
        let guard = lock_helper(&engine.handle.shared.helper.state);
        let (tx, rx) = std::sync::mpsc::channel();
        let (e2, path) = (NoHelp(engine.clone()), f.path().to_owned());
        let scan = std::thread::spawn(move || {
            let pool = BufferPool::new(1024, BS).unwrap();
            let file = ThreadPoolFile::open(path).unwrap();
            let mut s = ReadStream::builder(&pool, e2, file)
                .build(source::forward(0..n))
                .unwrap();
            finish(&mut s, 24, 0, n);
            let st = block_on(s.close());
            tx.send(st).unwrap();
        });
        let st = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the scan waited for the queue's lock");
        drop(guard);
        scan.join().unwrap();
        let es = engine.stats();
        assert_eq!(es.cached_queued, 0, "{es:?}");
        assert!(es.cached_contended > 0, "{es:?}");
        assert_eq!(es.nowait_full, st.reads, "{es:?} {st}");
    }
}
