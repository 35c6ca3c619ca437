//! A stream served from the pool is always ready; with its cooperative
//! budget it still lets the tasks beside it run, and a timeout around it can
//! fire. Counts, not times: the neighbour tasks count their turns, the scan
//! counts its pages, and the scans whose turns are counted run on an items
//! budget (the default budget is a time, which a count cannot check;
//! `coop_budget.rs` tests how it yields).
//!
//! `measure_neighbours` (ignored) prints the figures behind the default:
//! `cargo test --release -p pagestream --test coop -- --ignored --nocapture`.

use futures::StreamExt;
use pagestream::testing::{MemEngine, MemFile};
use pagestream::{source, BufferPool, ReadStream, YieldBudget};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};
use std::time::Duration;

/// Pages of the scanned file (all in the pool: every page a hit).
const PAGES: u64 = 4096;
const BLOCK: usize = 4096;
/// The items budget of the counted scans (ready items between two yields).
const BUDGET: u64 = 64;
/// Yields the neighbour may miss: the first and last windows, and the
/// scheduler's own bookkeeping turns.
const SLACK: u64 = 4;

/// A pool holding the whole file, filled by one scan.
fn hot_file(pages: u64) -> (BufferPool, MemEngine, MemFile) {
    let pool = BufferPool::new(pages as usize, BLOCK).unwrap();
    let engine = MemEngine::new();
    let file = engine.create_stamped(pages, BLOCK);
    let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
        .build(source::forward(0..pages))
        .unwrap();
    futures::executor::block_on(async {
        while let Some(p) = s.next().await {
            p.unwrap();
        }
    });
    (pool, engine, file)
}

/// Scans every page, counting them into `seen`; returns the count. A
/// pool that holds the file serves every page.
async fn scan(pool: BufferPool, engine: MemEngine, file: MemFile, seen: Arc<AtomicU64>) -> u64 {
    let budget = YieldBudget::Items(BUDGET as usize);
    scan_passes(pool, engine, file, seen, 1, budget).await
}

/// Scans every page `passes` times over, one stream [`reset`] between the
/// passes, on `budget`.
///
/// [`reset`]: ReadStream::reset
async fn scan_passes(
    pool: BufferPool,
    engine: MemEngine,
    file: MemFile,
    seen: Arc<AtomicU64>,
    passes: u64,
    budget: YieldBudget,
) -> u64 {
    let pages = file.bytes().len() as u64 / BLOCK as u64;
    let pool_holds_file = pool.frames() as u64 >= pages;
    let mut s = ReadStream::builder(&pool, engine, file)
        .yield_budget(budget)
        .build(source::forward(0..pages))
        .unwrap();
    let mut n = 0;
    for pass in 0..passes {
        if pass > 0 {
            s.reset(source::forward(0..pages));
        }
        let mut b = 0;
        while let Some(p) = s.next().await {
            let p = p.unwrap();
            assert_eq!(p.block(), b);
            b += 1;
            n += 1;
            seen.store(n, Ordering::Relaxed);
        }
        assert_eq!(b, pages);
    }
    if pool_holds_file {
        assert_eq!(s.stats().hits, n, "the scan is served from the pool");
    }
    n
}

/// Counts its turns until `stop`; yields with `tokio::task::yield_now`
/// (tokio defers that wake-up until the scheduler has run the tasks that
/// are ready and polled its driver).
async fn yield_counter(turns: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        turns.fetch_add(1, Ordering::Relaxed);
        tokio::task::yield_now().await;
    }
}

/// Yields once by waking itself: the task goes to the back of the run
/// queue at once (what any runtime does with a self-wake).
struct WakeSelf(bool);

impl Future for WakeSelf {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Counts its turns until `stop`, yielding with a self-wake.
async fn wake_counter(turns: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        turns.fetch_add(1, Ordering::Relaxed);
        WakeSelf(false).await;
    }
}

/// Runs `f` on its own thread; a hang becomes a failure after 60 s.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => {
            h.join().unwrap();
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(h.join().unwrap_err())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no result after 60 s (hang)"),
    }
}

fn expect_turns(what: &str, turns: u64) {
    let want = PAGES / BUDGET - SLACK;
    assert!(
        turns >= want,
        "{what}: the neighbour ran {turns} times during a scan of {PAGES} cached pages; \
         with a budget of {BUDGET} it must run at least {want} times"
    );
}

/// A `yield_now` neighbour's turns during `passes` scans of the cached file
/// on `budget`, the scan in the main future of a current-thread runtime (as
/// in `#[tokio::main(flavor = "current_thread")]`); and the pages scanned.
fn current_thread_turns(what: &str, passes: u64, budget: YieldBudget) -> (u64, u64) {
    within(what, move || {
        let (pool, engine, file) = hot_file(PAGES);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let turns = Arc::new(AtomicU64::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let h = tokio::spawn(yield_counter(Arc::clone(&turns), Arc::clone(&stop)));
            while turns.load(Ordering::Relaxed) == 0 {
                tokio::task::yield_now().await;
            }
            let before = turns.load(Ordering::Relaxed);
            let n = scan_passes(pool, engine, file, Arc::default(), passes, budget).await;
            let during = turns.load(Ordering::Relaxed) - before;
            stop.store(true, Ordering::Relaxed);
            h.await.unwrap();
            (during, n)
        })
    })
}

/// `#[tokio::main(flavor = "current_thread")]`: the scan in the main
/// future, a `yield_now` neighbour spawned beside it.
#[test]
fn current_thread_neighbour_runs_during_hot_scan() {
    let budget = YieldBudget::Items(BUDGET as usize);
    let (turns, n) = current_thread_turns("current-thread scan", 1, budget);
    assert_eq!(n, PAGES);
    expect_turns("current-thread runtime", turns);
}

/// A multi-thread runtime with one worker: the scan and a self-waking
/// neighbour are both spawned, so both run on that worker.
#[test]
fn one_worker_neighbour_runs_during_hot_scan() {
    let turns = within("one-worker scan", || {
        let (pool, engine, file) = hot_file(PAGES);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        rt.block_on(async {
            let turns = Arc::new(AtomicU64::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let h = tokio::spawn(wake_counter(Arc::clone(&turns), Arc::clone(&stop)));
            while turns.load(Ordering::Relaxed) == 0 {
                tokio::task::yield_now().await;
            }
            let t = Arc::clone(&turns);
            let during = tokio::spawn(async move {
                // On the worker, as the neighbour is.
                let before = t.load(Ordering::Relaxed);
                let n = scan(pool, engine, file, Arc::default()).await;
                assert_eq!(n, PAGES);
                t.load(Ordering::Relaxed) - before
            })
            .await
            .unwrap();
            stop.store(true, Ordering::Relaxed);
            h.await.unwrap();
            during
        })
    });
    expect_turns("multi-thread runtime, one worker", turns);
}

/// On the default budget (a time), a `yield_now` neighbour on a
/// current-thread runtime runs during a scan of 64 passes over the cached
/// file (far longer than the budget's 200 µs, whatever the machine).
#[test]
fn default_budget_lets_a_neighbour_run() {
    const PASSES: u64 = 64;
    let (turns, pages) = current_thread_turns("default-budget scan", PASSES, YieldBudget::DEFAULT);
    assert_eq!(pages, PASSES * PAGES);
    assert!(
        turns > 0,
        "the neighbour never ran during a scan of {pages} cached pages on the default budget"
    );
}

/// A timeout whose deadline has passed fires at the scan's first yield:
/// the scan is cut short. (The deadline lies before the runtime started, so
/// tokio's timer finds it elapsed when it is registered: no clock involved.
/// Were it found only at a turn of the timer driver, which a spawned task
/// that wakes itself sees every 61 polls, the scan's 256 yields still leave
/// room for it.)
fn timeout_fires(rt: tokio::runtime::Runtime, past: tokio::time::Instant) {
    const PAGES: u64 = 4 * self::PAGES;
    let (pool, engine, file) = hot_file(PAGES);
    let seen = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&seen);
    let fired = rt.block_on(async move {
        tokio::spawn(tokio::time::timeout_at(
            past,
            scan(pool, engine, file, Arc::clone(&s)),
        ))
        .await
        .unwrap()
        .is_err()
    });
    let seen = seen.load(Ordering::Relaxed);
    assert!(
        fired && seen < PAGES,
        "an elapsed timeout around a scan of {PAGES} cached pages must fire before the end: \
         fired={fired}, pages scanned {seen}"
    );
}

#[test]
fn timeout_fires_during_hot_scan_current_thread() {
    within("current-thread timeout", || {
        let past = tokio::time::Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        timeout_fires(rt, past)
    });
}

#[test]
fn timeout_fires_during_hot_scan_multi_thread() {
    within("multi-thread timeout", || {
        let past = tokio::time::Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        timeout_fires(rt, past)
    });
}

/// The figures behind the default budget, printed: on each tokio flavour, a
/// 1 ms ticker's ticks and a yield-counting neighbour's turns during a scan
/// of a cached file (warm: copied from memory each time, 8 passes; hot: in
/// the pool, 80 passes), and how often `timeout(2 ms, scan)` fired in 4 runs.
#[test]
#[ignore = "measurement: run with --release --ignored --nocapture"]
fn measure_neighbours() {
    const WARM_PAGES: u64 = 16384; // 64 MiB: copied on every scan
    const HOT_PAGES: u64 = 16384; // 64 MiB: in the pool
    let warm = {
        let pool = BufferPool::new(1024, BLOCK).unwrap();
        let engine = MemEngine::new();
        let file = engine.create_stamped(WARM_PAGES, BLOCK);
        (pool, engine, file)
    };
    let hot = hot_file(HOT_PAGES);
    for (cache, (pool, engine, file), passes) in [("warm", warm, 8), ("hot", hot, 80)] {
        for flavour in ["current_thread", "multi_thread(1)"] {
            let rt = || match flavour {
                "current_thread" => tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .unwrap(),
                _ => tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_time()
                    .build()
                    .unwrap(),
            };
            let mut rows = Vec::new();
            for _ in 0..4 {
                let (p, e, f) = (pool.clone(), engine.clone(), file.clone());
                let row = rt().block_on(async move {
                    let ticks = Arc::new(AtomicU64::new(0));
                    let turns = Arc::new(AtomicU64::new(0));
                    let stop = Arc::new(AtomicBool::new(false));
                    let (tk, st) = (Arc::clone(&ticks), Arc::clone(&stop));
                    let ticker = tokio::spawn(async move {
                        let mut i = tokio::time::interval(Duration::from_millis(1));
                        while !st.load(Ordering::Relaxed) {
                            i.tick().await;
                            tk.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    let yc = tokio::spawn(yield_counter(Arc::clone(&turns), Arc::clone(&stop)));
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let (tk, tu) = (Arc::clone(&ticks), Arc::clone(&turns));
                    let (p2, e2, f2) = (p.clone(), e.clone(), f.clone());
                    let row = tokio::spawn(async move {
                        let (t0, u0) = (tk.load(Ordering::Relaxed), tu.load(Ordering::Relaxed));
                        let start = std::time::Instant::now();
                        scan_passes(p2, e2, f2, Arc::default(), passes, YieldBudget::DEFAULT).await;
                        let ms = start.elapsed().as_secs_f64() * 1e3;
                        let t = tk.load(Ordering::Relaxed) - t0;
                        let u = tu.load(Ordering::Relaxed) - u0;
                        (ms, t, u)
                    })
                    .await
                    .unwrap();
                    let fired = tokio::spawn(tokio::time::timeout(
                        Duration::from_millis(2),
                        scan_passes(p, e, f, Arc::default(), passes, YieldBudget::DEFAULT),
                    ))
                    .await
                    .unwrap()
                    .is_err();
                    stop.store(true, Ordering::Relaxed);
                    ticker.await.unwrap();
                    yc.await.unwrap();
                    (row.0, row.1, row.2, fired)
                });
                rows.push(row);
            }
            let fired = rows.iter().filter(|r| r.3).count();
            let fmt: Vec<String> = rows
                .iter()
                .map(|(ms, t, u, _)| format!("{ms:.1} ms: {t} ticks, {u} turns"))
                .collect();
            println!(
                "{cache:4} {flavour:15} {}  | timeout(2 ms) fired {fired}/4",
                fmt.join("; ")
            );
        }
    }
}
