//! Helpers of the `UringTokioEngine` tests: tokio runtimes, engines that
//! skip where io_uring is unavailable, a wrapper that hooks every read, the
//! scans that check every page, and the check that frames handed back to
//! the pool are not written into afterwards.

use futures::StreamExt;
use pagestream::testing::{require_named, stamp};
use pagestream::{
    source, BlockSource, BufferPool, EngineHints, IoEngine, PageGuard, ReadOutcome, ReadRequest,
    ReadStream, StreamStats,
};
use pagestream_uring::{UringFile, UringTokioEngine};
use std::any::Any;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// How long a wait may take before a watchdog calls it a hang.
pub const WATCHDOG: Duration = Duration::from_secs(30);

/// How long held pages are left alone before their stamps are checked:
/// long after any read the kernel could still have been doing into them.
pub const SETTLE: Duration = Duration::from_millis(300);

/// A tokio runtime with I/O and timers: multi-thread with two workers, or
/// current-thread.
pub fn runtime(multi: bool) -> Runtime {
    if multi {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .expect("tokio runtime")
}

/// The conformance harness over real files, buffered or O_DIRECT.
pub fn harness(
    engine: UringTokioEngine,
    direct: bool,
    name: &str,
) -> pagestream::testing::DiskFiles<
    UringTokioEngine,
    impl Fn(&std::path::Path, usize) -> std::io::Result<UringFile> + Send + Sync + 'static,
> {
    pagestream::testing::DiskFiles::new(engine, name, move |path: &std::path::Path, block_size| {
        super::open(path, block_size, direct)
    })
}

/// The flavour's name, for messages.
pub fn flavour(multi: bool) -> &'static str {
    if multi {
        "multi-thread"
    } else {
        "current-thread"
    }
}

/// An engine reaped on `rt`, built with its handle from outside it (on a
/// current-thread runtime its reaper then runs only while the runtime is
/// driven by `block_on`), or `None` where io_uring is unavailable: the test
/// is then skipped, or fails under `CI=true` (see [`require_named`]).
pub fn engine_or_skip(test: &str, rt: &Runtime) -> Option<UringTokioEngine> {
    engine_or_skip_with(test, rt, UringTokioEngine::builder())
}

/// [`engine_or_skip`] with the inline `RWF_NOWAIT` attempt off, for tests
/// that need reads of a cached buffered file to go through the ring.
pub fn ring_engine_or_skip(test: &str, rt: &Runtime) -> Option<UringTokioEngine> {
    engine_or_skip_with(test, rt, UringTokioEngine::builder().nowait(false))
}

fn engine_or_skip_with(
    test: &str,
    rt: &Runtime,
    b: pagestream_uring::UringTokioBuilder,
) -> Option<UringTokioEngine> {
    require_named(test, "io_uring", b.handle(rt.handle().clone()).build())
}

/// An engine reaped on `rt`, for tests that already know io_uring works.
pub fn engine_on(rt: &Runtime) -> UringTokioEngine {
    UringTokioEngine::builder()
        .handle(rt.handle().clone())
        .build()
        .expect("UringTokioEngine")
}

/// [`engine_on`] with the inline `RWF_NOWAIT` attempt off, for tests that
/// need every buffered read in the ring: after an eviction, the kernel's
/// read-ahead behind one read may cache the next one's blocks before it
/// starts, and a cached read is copied as it starts.
pub fn ring_engine_on(rt: &Runtime) -> UringTokioEngine {
    UringTokioEngine::builder()
        .nowait(false)
        .handle(rt.handle().clone())
        .build()
        .expect("UringTokioEngine")
}

/// Whether io_uring works here; if not, the test named `test` is skipped
/// (or fails under `CI=true`).
pub fn io_uring_or_skip(test: &str) -> bool {
    let rt = runtime(false);
    engine_or_skip(test, &rt).is_some()
}

/// Waits until `done()` holds, looking every millisecond; fails naming
/// `what` after [`WATCHDOG`] (a hang, not a slow device).
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < WATCHDOG,
            "{what}: still not so after {WATCHDOG:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on a thread of its own and waits at most [`WATCHDOG`] for it:
/// a hang becomes a failure naming `what` (the stuck thread is left
/// behind; it cannot be stopped). A panic in `f` is resumed here.
pub fn within_watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(Ok(out)) => out,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(e) => panic!("{what} did not finish within {WATCHDOG:?} ({e})"),
    }
}

thread_local! {
    static IN_HELP: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is inside [`helping`] (a finish hook that sees this
/// runs inside an `IoEngine::help` call).
pub fn in_help() -> bool {
    IN_HELP.with(Cell::get)
}

/// Runs `f` (an `IoEngine::help` call) marked for [`in_help`] on this
/// thread; the mark goes when `f` returns or unwinds.
pub fn helping<T>(f: impl FnOnce() -> T) -> T {
    struct Unmark(bool);
    impl Drop for Unmark {
        fn drop(&mut self) {
            IN_HELP.with(|h| h.set(self.0));
        }
    }
    let _unmark = Unmark(IN_HELP.with(|h| h.replace(true)));
    f()
}

/// A read's finish hook.
pub type Hook = Box<dyn FnOnce(ReadOutcome) + Send>;

/// Makes the finish hook of a read (or none), given its number in the
/// order reads were started through the wrapper and its request.
pub type HookFactory = Arc<dyn Fn(u64, &ReadRequest) -> Option<Hook> + Send + Sync>;

/// Wraps a [`UringTokioEngine`]: every read gets the finish hook `hook`
/// makes for it, `help` runs marked for [`in_help`] and counted, and with
/// `help` off the hints say so, so that streams never call `help` and
/// their reads complete only in the reaper.
#[derive(Clone)]
pub struct Hooked {
    pub inner: UringTokioEngine,
    help: bool,
    hook: HookFactory,
    started: Arc<AtomicU64>,
    helps: Arc<AtomicU64>,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooked")
            .field("inner", &self.inner)
            .field("help", &self.help)
            .field("started", &self.started())
            .field("helps", &self.helps())
            .finish()
    }
}

impl Hooked {
    pub fn new(inner: UringTokioEngine, help: bool, hook: HookFactory) -> Hooked {
        Hooked {
            inner,
            help,
            hook,
            started: Arc::new(AtomicU64::new(0)),
            helps: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Reads started through the wrapper (remainders of short reads are
    /// the inner engine's and not counted).
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Calls of `help` through the wrapper.
    pub fn helps(&self) -> u64 {
        self.helps.load(Ordering::SeqCst)
    }
}

#[deny(clippy::missing_trait_methods)]
impl IoEngine for Hooked {
    type File = UringFile;

    fn start_read(&self, file: &UringFile, mut req: ReadRequest) {
        let n = self.started.fetch_add(1, Ordering::SeqCst);
        if let Some(hook) = (self.hook)(n, &req) {
            req.on_finish(hook);
        }
        self.inner.start_read(file, req);
    }

    fn hints(&self, file: &UringFile) -> EngineHints {
        self.inner.hints(file).with_help(self.help)
    }

    fn advise(&self, file: &UringFile, offset: u64, len: u64) -> bool {
        self.inner.advise(file, offset, len)
    }

    fn help(&self, file: &UringFile) -> bool {
        self.helps.fetch_add(1, Ordering::SeqCst);
        helping(|| self.inner.help(file))
    }

    fn name(&self) -> &'static str {
        "hooked"
    }
}

/// A panic payload whose own drop panics.
#[derive(Debug)]
pub struct BadPayload;

impl Drop for BadPayload {
    fn drop(&mut self) {
        panic!("BadPayload: this panic payload's drop panics on purpose");
    }
}

/// Checks that a caught panic is a [`BadPayload`] and forgets it (its drop
/// would panic here); any other panic is resumed, so that its message
/// fails the test.
pub fn expect_bad_payload(p: Box<dyn Any + Send>, what: &str) {
    if p.is::<BadPayload>() {
        std::mem::forget(p);
    } else {
        eprintln!("{what}: a panic other than the hooks' BadPayload");
        std::panic::resume_unwind(p);
    }
}

/// Scans `source` of `file` through `pool` with `engine`, checking that
/// every page is the stamp under `seed` of the block `expect` names next,
/// and that the scan hands out exactly `expect`; returns its stats.
pub async fn scan_checked<E, S>(
    pool: &BufferPool,
    engine: E,
    file: &UringFile,
    seed: u64,
    source: S,
    expect: &[u64],
    what: &str,
) -> StreamStats
where
    E: IoEngine<File = UringFile>,
    S: BlockSource<Data = ()>,
{
    let mut s = ReadStream::builder(pool, engine, file.clone())
        .build(source)
        .expect("build");
    let mut i = 0;
    while let Some(page) = s.next().await {
        let page = page.unwrap_or_else(|e| panic!("{what}: item {i}: {e}"));
        assert!(i < expect.len(), "{what}: more pages than blocks asked for");
        assert_eq!(page.block(), expect[i], "{what}: item {i}");
        assert!(
            stamp::check(seed, page.block(), &page),
            "{what}: block {} is not its stamp",
            page.block()
        );
        i += 1;
    }
    assert_eq!(i, expect.len(), "{what}: the scan ended early");
    s.close().await
}

/// Reads blocks `0..n` of `file` into `pool` (`reads` reads of `combine`
/// blocks in flight, full look-ahead) and returns every page's guard: with
/// `n` the pool's frames, every frame is reused and then held.
pub async fn hold_pages<E: IoEngine<File = UringFile>>(
    pool: &BufferPool,
    engine: E,
    file: &UringFile,
    n: u64,
    reads: usize,
    combine: usize,
) -> Vec<PageGuard> {
    let mut s = ReadStream::builder(pool, engine, file.clone())
        .max_ios(reads)
        .io_combine_limit(combine)
        .full(true)
        .build(source::forward(0..n))
        .expect("build");
    let mut held = Vec::with_capacity(n as usize);
    while let Some(page) = s.next().await {
        // Checked later, by `assert_unchanged`: the pages must be held
        // while reads given up earlier might still be written.
        held.push(page.expect("read of the pages to hold"));
    }
    assert_eq!(held.len() as u64, n, "not every page to hold was read");
    held
}

/// [`hold_pages`] on a runtime and engine of its own (for when the engine
/// under test is gone or its runtime shut down).
pub fn hold_pages_elsewhere(
    pool: &BufferPool,
    file: &UringFile,
    n: u64,
    reads: usize,
    combine: usize,
) -> Vec<PageGuard> {
    let rt = runtime(false);
    let engine = engine_on(&rt);
    rt.block_on(hold_pages(pool, engine, file, n, reads, combine))
}

/// Waits [`SETTLE`], then checks that every held page is still the stamp
/// under `seed` of its block: no read given up before the pages were read
/// into these frames wrote into them afterwards.
pub fn assert_unchanged(seed: u64, held: &[PageGuard], what: &str) {
    std::thread::sleep(SETTLE);
    let changed = stamp::wrong_blocks(seed, held.iter().map(|p| (p.block(), &p[..])));
    assert!(
        changed.is_empty(),
        "{what}: {} of {} held pages changed under their guards (first: block {})",
        changed.len(),
        held.len(),
        changed[0],
    );
}

/// Waits, at most [`WATCHDOG`], for scan tasks spawned on `rt` and returns
/// their stats in order: a hang or a failed task fails the test.
pub fn join_scans(
    rt: &Runtime,
    tasks: Vec<tokio::task::JoinHandle<StreamStats>>,
) -> Vec<StreamStats> {
    let joined = rt.block_on(async {
        tokio::time::timeout(WATCHDOG, futures::future::join_all(tasks))
            .await
            .expect("the scans hang")
    });
    joined
        .into_iter()
        .map(|s| s.expect("a scan task failed"))
        .collect()
}
