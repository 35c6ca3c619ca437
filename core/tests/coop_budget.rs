//! The yield budget (`StreamBuilder::yield_budget`), polled by hand: how
//! many items come between two `Pending`s, that each such `Pending` has
//! woken the task, that it is not a wait, and (with the `tokio` feature)
//! that the stream takes part in tokio's own budget.
//!
//! `cargo test -p pagestream --test coop_budget` (and `--features tokio`).

use futures::{Stream, StreamExt};
use pagestream::testing::{MemEngine, MemFile};
use pagestream::{
    source, BlockSource, BufferPool, BuildError, ReadStream, StreamStats, YieldBudget,
};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

const BLOCK: usize = 4096;

#[derive(Default)]
struct CountingWaker(AtomicU64);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// What polling a stream to its end by hand saw.
#[derive(Debug, Default)]
struct Seen {
    /// Lengths of the runs of `Ready` items (the end included) between
    /// two `Pending`s.
    runs: Vec<u64>,
    pages: u64,
    errors: u64,
}

/// Polls `s` until it ends. Every `Pending` must have woken the task (the
/// engine completes reads inline, so nothing else would), or this fails
/// instead of hanging.
fn poll_to_end<St>(s: &mut St) -> Seen
where
    St: Stream<Item = std::io::Result<pagestream::PageGuard<()>>> + Unpin,
{
    let counter = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&counter));
    let mut cx = Context::from_waker(&waker);
    let mut seen = Seen::default();
    let mut run = 0;
    for _ in 0..10_000_000 {
        let wakes = counter.0.load(Ordering::Relaxed);
        match Pin::new(&mut *s).poll_next(&mut cx) {
            Poll::Ready(item) => {
                run += 1;
                match item {
                    None => {
                        seen.runs.push(run);
                        return seen;
                    }
                    Some(Ok(_)) => seen.pages += 1,
                    Some(Err(_)) => seen.errors += 1,
                }
            }
            Poll::Pending => {
                assert!(
                    counter.0.load(Ordering::Relaxed) > wakes,
                    "Pending after {run} items without waking the task"
                );
                seen.runs.push(run);
                run = 0;
            }
        }
    }
    panic!("no end after 10 million polls");
}

/// Every run but the last is `n` items; the last one, 1 to `n`.
fn assert_runs(what: &str, runs: &[u64], n: u64) {
    let (last, full) = runs.split_last().unwrap();
    assert!(
        full.iter().all(|&r| r == n) && (1..=n).contains(last),
        "{what}: runs of ready items between yields should be {n} each: {runs:?}"
    );
}

/// A pool holding the whole file (`hot`: filled by one scan first).
fn setup(pages: u64, hot: bool) -> (BufferPool, MemEngine, MemFile) {
    let pool = BufferPool::new(pages as usize, BLOCK).unwrap();
    let engine = MemEngine::new();
    let file = engine.create_stamped(pages, BLOCK);
    if hot {
        let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
            .yield_budget(YieldBudget::Unlimited)
            .build(source::forward(0..pages))
            .unwrap();
        futures::executor::block_on(async {
            while let Some(p) = s.next().await {
                p.unwrap();
            }
        });
    }
    (pool, engine, file)
}

fn stream<S: BlockSource<Data = ()>>(
    (pool, engine, file): &(BufferPool, MemEngine, MemFile),
    budget: YieldBudget,
    source: S,
) -> ReadStream<MemEngine, S> {
    ReadStream::builder(pool, engine.clone(), file.clone())
        .yield_budget(budget)
        .build(source)
        .unwrap()
}

/// The counters a yield must not change: all but `budget_yields`.
fn without_yields(mut st: StreamStats) -> StreamStats {
    st.budget_yields = 0;
    st
}

#[test]
fn default_budget_is_auto() {
    assert_eq!(YieldBudget::default(), YieldBudget::Auto);
    assert_eq!(YieldBudget::DEFAULT, YieldBudget::Auto);
}

/// `Auto` chooses its time at the stream's first poll; off tokio, the
/// single-thread one. A budget given explicitly is kept as given.
#[test]
fn auto_chooses_its_time_at_the_first_poll() {
    let s0 = setup(64, true);
    let mut s = stream(&s0, YieldBudget::Auto, source::forward(0..64));
    assert_eq!(s.yield_budget(), YieldBudget::Auto, "before any poll");
    futures::executor::block_on(s.next()).unwrap().unwrap();
    assert_eq!(s.yield_budget(), YieldBudget::Time(YieldBudget::AUTO_TIME));
    assert_eq!(YieldBudget::AUTO_TIME, Duration::from_micros(200));
    for b in [
        YieldBudget::Items(7),
        YieldBudget::Time(Duration::from_millis(3)),
        YieldBudget::Unlimited,
    ] {
        let mut s = stream(&s0, b, source::forward(0..64));
        assert_eq!(s.yield_budget(), b, "{b:?} before any poll");
        futures::executor::block_on(s.next()).unwrap().unwrap();
        assert_eq!(s.yield_budget(), b, "{b:?} after a poll");
    }
}

/// A time budget starts its clock at a run's first poll and looks at it
/// every `CHECK_EVERY` items: with a time shorter than any 16 items take,
/// every run is one look long; with an hour, no scan here yields. Hot and
/// cold alike, and the yields change no other counter.
#[test]
fn a_time_budget_yields_once_its_time_is_up() {
    const PAGES: u64 = 1000;
    let every = YieldBudget::CHECK_EVERY as u64;
    for hot in [true, false] {
        let what = format!("hot={hot}");
        let s0 = setup(PAGES, hot);
        let budget = YieldBudget::Time(Duration::from_nanos(1));
        let mut s = stream(&s0, budget, source::forward(0..PAGES));
        let seen = poll_to_end(&mut s);
        assert_eq!(seen.pages, PAGES, "{what}");
        assert_runs(&what, &seen.runs, every);
        let st = s.stats();
        assert_eq!(st.budget_yields, seen.runs.len() as u64 - 1, "{what}");
        assert_eq!(st.waits, 0, "{what}: a yield is not a wait");

        let s1 = setup(PAGES, hot);
        let hour = YieldBudget::Time(Duration::from_secs(3600));
        let mut h = stream(&s1, hour, source::forward(0..PAGES));
        let hseen = poll_to_end(&mut h);
        assert_eq!(hseen.runs, vec![PAGES + 1], "{what}: an hour is never up");
        assert_eq!(
            without_yields(st),
            h.stats(),
            "{what}: the yields changed the stream"
        );
    }
}

/// Hot (the fast path) and cold (reads completed inline, through the
/// queue): after `n` ready items the stream yields once, having woken the
/// task, and the yields change no other counter (no waits, same distance).
#[test]
fn yields_after_n_ready_items_on_fast_path_and_queue() {
    const PAGES: u64 = 1000;
    for hot in [true, false] {
        for n in [1, 7, 64, 1000, 5000] {
            let what = format!("hot={hot} n={n}");
            let s0 = setup(PAGES, hot);
            let mut s = stream(&s0, YieldBudget::Items(n), source::forward(0..PAGES));
            let seen = poll_to_end(&mut s);
            assert_eq!(seen.pages, PAGES, "{what}");
            assert_runs(&what, &seen.runs, n as u64);
            let st = s.stats();
            assert_eq!(st.budget_yields, seen.runs.len() as u64 - 1, "{what}");
            assert_eq!(
                (st.waits, st.wait_time),
                (0, Default::default()),
                "{what}: a yield is not a wait"
            );
            if hot {
                // All but the first page, which starts the fast path.
                assert_eq!(
                    st.fast_path_pages,
                    PAGES - 1,
                    "{what}: the fast path served the scan"
                );
            } else {
                assert_eq!(st.blocks_read, PAGES, "{what}: the scan read every page");
            }

            // The same scan unlimited: never a Pending, and the same counters.
            let s1 = setup(PAGES, hot);
            let mut u = stream(&s1, YieldBudget::Unlimited, source::forward(0..PAGES));
            let useen = poll_to_end(&mut u);
            assert_eq!(
                useen.runs,
                vec![PAGES + 1],
                "{what}: unlimited never yields"
            );
            assert_eq!(u.stats().budget_yields, 0);
            assert_eq!(
                without_yields(st),
                u.stats(),
                "{what}: the yields changed the stream"
            );
        }
    }
}

/// Errors and the end are items too: a consumer that goes on polling a
/// stream of errors, or an ended one, is handed the thread back as well.
#[test]
fn errors_and_the_end_count() {
    const PAGES: u64 = 10;
    let s0 = setup(PAGES, true);
    // 10 pages, then 300 blocks past the end: errors in their place.
    let mut s = stream(&s0, YieldBudget::Items(16), source::forward(0..PAGES + 300));
    let seen = poll_to_end(&mut s);
    assert_eq!((seen.pages, seen.errors), (PAGES, 300));
    assert_runs("past-end errors", &seen.runs, 16);

    // Polling on after the end: 40 more polls yield after every 16 items.
    let counter = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&counter));
    let mut cx = Context::from_waker(&waker);
    let ends = (0..40)
        .map(|_| Pin::new(&mut s).poll_next(&mut cx).is_ready())
        .collect::<Vec<_>>();
    let last_run = *seen.runs.last().unwrap() as usize;
    let mut expect = Vec::new();
    let mut run = last_run;
    for _ in 0..40 {
        if run == 16 {
            expect.push(false);
            run = 0;
        } else {
            expect.push(true);
            run += 1;
        }
    }
    assert_eq!(ends, expect, "polls after the end (true: Ready(None))");
}

/// A consumer that resets the stream every few pages (an index scan's
/// rescans) is still made to yield: the count runs on across `reset`.
#[test]
fn count_runs_on_across_reset() {
    const PAGES: u64 = 64;
    let s0 = setup(PAGES, true);
    let mut s = stream(&s0, YieldBudget::Items(10), source::forward(0..PAGES));
    let counter = Arc::new(CountingWaker::default());
    let waker = Waker::from(Arc::clone(&counter));
    let mut cx = Context::from_waker(&waker);
    let (mut ready, mut pending) = (0u64, 0u64);
    for i in 0..200 {
        // Three pages, then start again elsewhere.
        let mut got = 0;
        while got < 3 {
            match Pin::new(&mut s).poll_next(&mut cx) {
                Poll::Ready(Some(p)) => {
                    p.unwrap();
                    got += 1;
                    ready += 1;
                }
                Poll::Ready(None) => panic!("ended early"),
                Poll::Pending => pending += 1,
            }
        }
        s.reset(source::forward(i % 32..PAGES));
    }
    assert_eq!(ready, 600);
    assert_eq!(
        pending,
        600 / 10 - 1,
        "one yield per 10 pages, across resets"
    );
    assert_eq!(s.stats().budget_yields, pending);
}

#[test]
fn a_zero_budget_is_an_error_naming_the_budget() {
    for zero in [YieldBudget::Items(0), YieldBudget::Time(Duration::ZERO)] {
        let (pool, engine, file) = setup(4, false);
        let err = ReadStream::builder(&pool, engine, file)
            .yield_budget(zero)
            .build(source::forward(0..4))
            .unwrap_err();
        assert!(
            matches!(
                err,
                BuildError::Zero {
                    what: "yield budget"
                }
            ),
            "{zero:?}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            "yield budget must be more than zero (got 0)"
        );
    }
}

/// With the `tokio` feature: tokio's per-task budget and tokio's deferred
/// yield.
#[cfg(feature = "tokio")]
mod tokio_budget {
    use super::*;
    use std::sync::atomic::AtomicBool;

    const PAGES: u64 = 4096;
    /// tokio's budget per task poll (`tokio::task::coop`).
    const TOKIO_BUDGET: u64 = 128;
    const SLACK: u64 = 4;

    async fn yield_counter(turns: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            turns.fetch_add(1, Ordering::Relaxed);
            tokio::task::yield_now().await;
        }
    }

    /// Scans `s` (`items` pages) on the runtime's worker beside a
    /// `yield_now` counter; returns the counter's turns during the scan and
    /// the stream's stats.
    fn turns_during<S>(
        rt: tokio::runtime::Runtime,
        mut s: ReadStream<MemEngine, S>,
        items: u64,
    ) -> (u64, StreamStats)
    where
        S: BlockSource<Data = ()> + Send + 'static,
    {
        rt.block_on(async move {
            let turns = Arc::new(AtomicU64::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let h = tokio::spawn(yield_counter(Arc::clone(&turns), Arc::clone(&stop)));
            while turns.load(Ordering::Relaxed) == 0 {
                tokio::task::yield_now().await;
            }
            let t = Arc::clone(&turns);
            let (during, st) = tokio::spawn(async move {
                let before = t.load(Ordering::Relaxed);
                let mut n = 0;
                while let Some(p) = s.next().await {
                    p.unwrap();
                    n += 1;
                }
                assert_eq!(n, items);
                (t.load(Ordering::Relaxed) - before, s.stats())
            })
            .await
            .unwrap();
            stop.store(true, Ordering::Relaxed);
            h.await.unwrap();
            (during, st)
        })
    }

    fn one_worker() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap()
    }

    /// With its own budget off, the stream still yields when tokio's
    /// budget for the task is spent: a unit every `CHECK_EVERY` items.
    #[test]
    fn takes_part_in_tokios_budget() {
        const PASSES: u64 = 16;
        let items = PASSES * PAGES;
        for rt in [
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap(),
            one_worker(),
        ] {
            let s0 = setup(PAGES, true);
            let blocks = source::iter((0..items).map(|b| b % PAGES));
            let s = stream(&s0, YieldBudget::Unlimited, blocks);
            let (turns, st) = turns_during(rt, s, items);
            let every = YieldBudget::CHECK_EVERY as u64;
            let want = items / (TOKIO_BUDGET * every) - SLACK;
            assert!(
                turns >= want,
                "the neighbour ran {turns} times, want ≥ {want}"
            );
            assert!(st.budget_yields >= want && st.waits == 0, "{st:?}");
        }
    }

    /// The stream's own yields go through tokio's deferred wake-up, so a
    /// `yield_now` neighbour on the same worker gets a turn at each.
    #[test]
    fn own_yields_let_a_yield_now_neighbour_run() {
        let s0 = setup(PAGES, true);
        let s = stream(&s0, YieldBudget::Items(32), source::forward(0..PAGES));
        let (turns, st) = turns_during(one_worker(), s, PAGES);
        let want = PAGES / 32 - SLACK;
        assert!(
            turns >= want,
            "the neighbour ran {turns} times, want ≥ {want}"
        );
        assert_eq!(st.budget_yields, PAGES / 32, "{st:?}");
    }

    /// `Auto` on tokio: 1 ms on the multi-thread runtime, whether the
    /// stream is polled in a spawned task or in `block_on`; 200 µs on the
    /// current-thread runtime.
    #[test]
    fn auto_is_longer_on_the_multi_thread_runtime() {
        let multi = YieldBudget::Time(YieldBudget::AUTO_TIME_MULTI_THREAD);
        let single = YieldBudget::Time(YieldBudget::AUTO_TIME);
        assert_eq!(
            YieldBudget::AUTO_TIME_MULTI_THREAD,
            Duration::from_millis(1)
        );
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for (rt, want, what) in [
            (one_worker(), multi, "multi-thread"),
            (current, single, "current-thread"),
        ] {
            let s0 = setup(64, true);
            let mut s = stream(&s0, YieldBudget::Auto, source::forward(0..64));
            rt.block_on(s.next()).unwrap().unwrap();
            assert_eq!(s.yield_budget(), want, "{what}, block_on");
            let mut s = stream(&s0, YieldBudget::Auto, source::forward(0..64));
            let got = rt.block_on(async move {
                tokio::spawn(async move {
                    s.next().await.unwrap().unwrap();
                    s.yield_budget()
                })
                .await
                .unwrap()
            });
            assert_eq!(got, want, "{what}, spawned");
        }
    }

    /// `unconstrained` and `Unlimited` together: the stream never yields.
    #[test]
    fn unconstrained_and_unlimited_never_yield() {
        let s0 = setup(PAGES, true);
        let s = stream(&s0, YieldBudget::Unlimited, source::forward(0..PAGES));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let st = rt.block_on(tokio::task::coop::unconstrained(async move {
            let mut s = s;
            while let Some(p) = s.next().await {
                p.unwrap();
            }
            s.stats()
        }));
        assert_eq!(st.budget_yields, 0);
    }
}

/// The cost behind the default: ns per page of a scan served from the pool
/// (a 4 MiB file, 200 passes per run), by budget, on `futures::executor`
/// and on a tokio current-thread runtime, alone: the fastest of 15 runs,
/// the budgets interleaved.
/// `cargo test --release -p pagestream --test coop_budget -- --ignored --nocapture`
#[test]
#[ignore = "measurement: run with --release --ignored --nocapture"]
fn measure_budget_cost() {
    const PAGES: u64 = 1024;
    const PASSES: u64 = 200;
    let s0 = &setup(PAGES, true);
    let budgets = [
        YieldBudget::Items(8),
        YieldBudget::Items(16),
        YieldBudget::Items(32),
        YieldBudget::Items(64),
        YieldBudget::Items(128),
        YieldBudget::Items(256),
        YieldBudget::Time(Duration::from_micros(10)),
        YieldBudget::Time(Duration::from_micros(50)),
        YieldBudget::Unlimited,
    ];
    let scan = |budget: YieldBudget| async move {
        let mut s = stream(s0, budget, source::forward(0..PAGES));
        let start = std::time::Instant::now();
        for pass in 0..PASSES {
            if pass > 0 {
                s.reset(source::forward(0..PAGES));
            }
            while let Some(p) = s.next().await {
                std::hint::black_box(p.unwrap()[0]);
            }
        }
        start.elapsed().as_nanos() as f64 / (PAGES * PASSES) as f64
    };
    for executor in ["futures", "tokio current_thread"] {
        let mut best = [f64::MAX; 7];
        for _ in 0..15 {
            for (i, &b) in budgets.iter().enumerate() {
                let ns = match executor {
                    "futures" => futures::executor::block_on(scan(b)),
                    _ => tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap()
                        .block_on(scan(b)),
                };
                best[i] = best[i].min(ns);
            }
        }
        let mut line = format!("{executor:21}");
        for (b, ns) in budgets.iter().zip(best) {
            line += &format!("  {b:?}: {ns:.1}");
        }
        println!("{line}  (ns/page by budget)");
    }
}
