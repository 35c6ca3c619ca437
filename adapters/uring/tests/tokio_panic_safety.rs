//! [`UringTokioEngine`] when a read's finish hook panics (with a payload
//! whose own drop panics), wherever the read is completed: in the reaper,
//! which goes on reaping; in a stream's `help`, where the panic reaches
//! the polling task and the other reads taken with it are completed; in
//! the reaper's drop (the runtime shutting down) and in the driver's drop
//! (the engine dropped), which finish or cancel every read before any
//! frame is handed back. Frames handed back are then read again for
//! another file and held: none may change under its guard.

#![cfg(feature = "tokio")]

mod common;

use common::on_tokio::{
    assert_unchanged, engine_on, engine_or_skip, expect_bad_payload, hold_pages,
    hold_pages_elsewhere, in_help, ring_engine_on, ring_engine_or_skip, runtime, scan_checked,
    within_watchdog, BadPayload, Hook, HookFactory, Hooked,
};
use common::{assert_idle, evict, one_read_stream, open, poll_once, stamped};
use futures::StreamExt;
use pagestream::testing::StampedFile;
use pagestream::{source, BufferPool, EngineFile, ReadOutcome, ReadStream};
use pagestream_uring::UringFile;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// 16 KiB blocks, 128 to a read: 2 MiB reads, as in `panic_safety.rs`.
const BS: usize = 16 << 10;
const COMBINE: usize = 128;
/// Reads in flight when the engine or its runtime goes.
const READS: usize = 64;
/// Blocks those reads cover (128 MiB), and the pool's frames.
const N: u64 = (READS * COMBINE) as u64;

/// A hook that panics with a [`BadPayload`].
fn panic_with_bad_payload() -> ! {
    std::panic::panic_any(BadPayload)
}

/// The first read of every block of `0..N` through `engine`, one stream
/// per read (a stream's budget at `max_ios` 0 is one read, so together
/// they claim the whole pool), each polled once on this thread and then
/// dropped: the reads stay in flight.
fn start_and_abandon_reads(pool: &BufferPool, engine: &Hooked, file: &UringFile) {
    for r in 0..READS as u64 {
        let first = r * COMBINE as u64;
        let mut s = one_read_stream(pool, engine.clone(), file, first, COMBINE);
        assert!(futures::executor::block_on(poll_once(&mut s.next())).is_pending());
    }
}

/// Hooks that, once `armed`, record in `reading_seen` the most frames the
/// pool still had being read when one ran (its own frames are handed back
/// before it runs), count themselves in `ran`, and panic with a
/// [`BadPayload`].
fn armed_panics(
    pool: &BufferPool,
    armed: &Arc<AtomicBool>,
    reading_seen: &Arc<AtomicUsize>,
    ran: &Arc<AtomicUsize>,
) -> HookFactory {
    let (pool, armed, seen, ran) = (
        pool.clone(),
        Arc::clone(armed),
        Arc::clone(reading_seen),
        Arc::clone(ran),
    );
    Arc::new(move |_, _| -> Option<Hook> {
        let (pool, armed, seen, ran) = (
            pool.clone(),
            Arc::clone(&armed),
            Arc::clone(&seen),
            Arc::clone(&ran),
        );
        Some(Box::new(move |_| {
            if armed.load(Ordering::SeqCst) {
                seen.fetch_max(pool.stats().reading, Ordering::SeqCst);
                ran.fetch_add(1, Ordering::SeqCst);
                panic_with_bad_payload();
            }
        }))
    })
}

/// The first 8 reads' hooks panic (with a [`BadPayload`]) in the reaper,
/// on a runtime named for it; the stream is polled on a plain thread and
/// never helps (the wrapper's hints turn help off). The reaper survives the
/// panics: every later read still completes there and wakes the stream,
/// through this scan and a second one, and every page is right.
#[test]
fn hook_panic_in_the_reaper_keeps_it_reaping() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("reaper-rt")
        .enable_all()
        .build()
        .expect("tokio runtime");
    let Some(engine) = engine_or_skip("hook_panic_in_the_reaper_keeps_it_reaping", &rt) else {
        return;
    };
    let (n, bs, panics) = (1024u64, 8192, 8u64);
    let (file, seed) = stamped(n, bs, true);
    // Smaller than the file: the second scan reads again.
    let pool = BufferPool::new(256, bs).expect("pool");
    let threads: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let panicked = Arc::new(AtomicU64::new(0));
    let hooked = {
        let (threads, panicked) = (Arc::clone(&threads), Arc::clone(&panicked));
        Hooked::new(
            engine.clone(),
            false,
            Arc::new(move |k, _| -> Option<Hook> {
                let (threads, panicked) = (Arc::clone(&threads), Arc::clone(&panicked));
                Some(Box::new(move |_| {
                    let name = std::thread::current().name().map(str::to_owned);
                    threads.lock().unwrap().push(name);
                    if k < panics {
                        panicked.fetch_add(1, Ordering::SeqCst);
                        panic_with_bad_payload();
                    }
                }))
            }),
        )
    };
    let (stats, started_first) = {
        let (pool, hooked) = (pool.clone(), hooked.clone());
        within_watchdog("two scans whose reads the reaper completes", move || {
            let blocks: Vec<u64> = (0..n).collect();
            let scan = |what: &str| {
                futures::executor::block_on(scan_checked(
                    &pool,
                    hooked.clone(),
                    &file,
                    seed,
                    source::forward(0..n),
                    &blocks,
                    what,
                ))
            };
            let first = scan("first scan");
            let started_first = hooked.started();
            (vec![first, scan("second scan")], started_first)
        })
    };
    assert_eq!(
        panicked.load(Ordering::SeqCst),
        panics,
        "not every hook panicked"
    );
    assert!(
        hooked.started() > started_first && started_first > panics,
        "no reads after the panics: {} then {}",
        started_first,
        hooked.started()
    );
    for st in &stats {
        assert_eq!(st.pages, n, "{st}");
    }
    assert_eq!(hooked.helps(), 0, "the stream helped");
    let threads = threads.lock().unwrap().clone();
    assert_eq!(threads.len() as u64, hooked.started());
    assert!(
        threads
            .iter()
            .all(|t| t.as_deref().is_some_and(|t| t.starts_with("reaper-rt"))),
        "a read was completed outside the reaper's runtime: {threads:?}"
    );
    assert_eq!(engine.in_flight(), 0);
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
}

/// Reads' hooks panic (with a [`BadPayload`]) while the stream's `help`
/// completes them: the stream is polled in a task of one runtime, again and
/// again, and the engine's reaper is on another that is not driven, so
/// only `help` completes reads (the inline `RWF_NOWAIT` attempt is off:
/// read-ahead caches the file as the scan goes). The panic reaches the polling task; every read taken
/// off the ring with it was completed (each hook ran, as `Done`), none
/// lost between the ring and its completion; the reads the dropped stream
/// left in flight are finished once the reaper runs. A panicking hook saw
/// other frames still being read; every frame is then read again for another
/// file and held unchanged, and the blocks are read right again.
#[test]
fn hook_panic_in_help_surfaces_in_the_polling_task() {
    let test = "hook_panic_in_help_surfaces_in_the_polling_task";
    let r1 = runtime(false);
    let Some(engine) = ring_engine_or_skip(test, &r1) else {
        return;
    };
    let r2 = runtime(true);
    // The hooks of reads `k..k + 4` panic: a stream keeps up to `reads`
    // reads in flight once its look-ahead has grown, and the help that
    // completes them often takes a whole batch at once.
    let (n, combine, reads, k) = (4096u64, 16, 32, 40u64);
    let frames = 1024;
    let a = StampedFile::new("help-panic", n, BS);
    let (other, other_seed) = stamped(frames as u64, BS, false);
    let pool = BufferPool::new(frames, BS).expect("pool");
    for direct in [true, false] {
        let what = format!("direct={direct}");
        let file = open(a.path(), BS, direct).expect("open");
        pool.invalidate(file.id());
        if !direct {
            evict(a.path(), n * BS as u64);
        }
        let outcomes: Arc<Mutex<Vec<ReadOutcome>>> = Arc::default();
        let reading_seen = Arc::new(AtomicUsize::new(0));
        // Panicking hooks that ran inside help, and outside it.
        let panicked = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let hooked = {
            let (pool, outcomes) = (pool.clone(), Arc::clone(&outcomes));
            let (seen, panicked) = (Arc::clone(&reading_seen), Arc::clone(&panicked));
            Hooked::new(
                engine.clone(),
                true,
                Arc::new(move |i, _| -> Option<Hook> {
                    let outcomes = Arc::clone(&outcomes);
                    let panics = (k..k + 4)
                        .contains(&i)
                        .then(|| (pool.clone(), Arc::clone(&seen), Arc::clone(&panicked)));
                    Some(Box::new(move |outcome| {
                        outcomes.lock().unwrap().push(outcome);
                        if let Some((pool, seen, panicked)) = panics {
                            seen.fetch_max(pool.stats().reading, Ordering::SeqCst);
                            let outside = usize::from(!in_help());
                            panicked[outside].fetch_add(1, Ordering::SeqCst);
                            panic_with_bad_payload();
                        }
                    }))
                }),
            )
        };
        let task = {
            let (pool, hooked, file, seed) = (pool.clone(), hooked.clone(), file.clone(), a.seed());
            r2.spawn(async move {
                let mut s = ReadStream::builder(&pool, hooked, file)
                    .max_ios(reads)
                    .io_combine_limit(combine)
                    .full(true)
                    .build(source::forward(0..n))
                    .expect("build");
                // Nothing wakes the task when a read is done (the reaper
                // does not run), so it wakes itself on every poll (a busy
                // yield): the stream helps each time it is polled.
                while let Some(page) = std::future::poll_fn(|cx| {
                    cx.waker().wake_by_ref();
                    s.poll_next_unpin(cx)
                })
                .await
                {
                    let page = page.expect("page");
                    assert!(pagestream::testing::stamp::check(seed, page.block(), &page));
                }
            })
        };
        let err = r2
            .block_on(task)
            .expect_err("the hook's panic did not reach the polling task");
        assert!(err.is_panic(), "{what}: {err}");
        expect_bad_payload(err.into_panic(), &what);
        let [inside, outside] = [0, 1].map(|i| panicked[i].load(Ordering::SeqCst));
        assert!(
            inside > 0 && outside == 0,
            "{what}: panicking hooks inside help {inside}, outside {outside}"
        );
        assert!(
            reading_seen.load(Ordering::SeqCst) > 0,
            "{what}: no other read was in flight when the hook panicked"
        );
        {
            // Nothing else completes reads meanwhile: every read is either
            // still in the ring's table or completed.
            let outcomes = outcomes.lock().unwrap();
            assert_eq!(
                outcomes.len() + engine.in_flight(),
                hooked.started() as usize,
                "{what}: reads lost between the ring and their completion"
            );
            assert!(
                outcomes.iter().all(|&o| o == ReadOutcome::Done),
                "{what}: {outcomes:?}"
            );
        }
        // The reaper finishes what the dropped stream left in flight.
        r1.block_on(async {
            tokio::time::timeout(common::on_tokio::WATCHDOG, async {
                while engine.in_flight() > 0 || pool.stats().reading > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            })
            .await
            .expect("the reaper did not finish the dropped stream's reads")
        });
        {
            let outcomes = outcomes.lock().unwrap();
            assert_eq!(outcomes.len(), hooked.started() as usize, "{what}");
            assert!(
                outcomes.iter().all(|&o| o == ReadOutcome::Done),
                "{what}: {outcomes:?}"
            );
        }
        assert_idle(&pool, &what);

        let held = r1.block_on(hold_pages(
            &pool,
            engine.clone(),
            &other,
            frames as u64,
            reads,
            combine,
        ));
        assert_unchanged(other_seed, &held, &what);
        drop(held);
        let blocks: Vec<u64> = (0..n).collect();
        r1.block_on(scan_checked(
            &pool,
            engine.clone(),
            &file,
            a.seed(),
            source::forward(0..n),
            &blocks,
            &format!("{what}: scan again"),
        ));
    }
}

/// `READS` reads of 2 MiB are in flight (O_DIRECT, and buffered after
/// eviction; the engine's reaper is on a runtime that is not driven, so
/// none is completed) when the last handle on the engine is dropped, and
/// their hooks, armed then, panic (with payloads whose drop panics) while
/// the driver cancels them. The first panic reaches the drop; every hook
/// ran, some while other frames were still being read; the reads' blocks
/// are not valid, and nothing is pinned or being read. Every frame is then
/// read again for another file and held unchanged, and the blocks are read
/// right through a new engine.
#[test]
fn hook_panic_in_driver_drop_frees_no_frame_under_the_kernel() {
    let test = "hook_panic_in_driver_drop_frees_no_frame_under_the_kernel";
    let r1 = runtime(false);
    if engine_or_skip(test, &r1).is_none() {
        return;
    }
    let a = StampedFile::new("driver-drop", N, BS);
    let (other, other_seed) = stamped(N, BS, false);
    let pool = BufferPool::new(N as usize, BS).expect("pool");
    let mut in_flight_seen = 0;
    for direct in [true, false] {
        let what = format!("direct={direct}");
        let file = open(a.path(), BS, direct).expect("open");
        pool.invalidate(file.id());
        if !direct {
            evict(a.path(), N * BS as u64);
        }
        let armed = Arc::new(AtomicBool::new(false));
        let reading_seen = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        let hooked = Hooked::new(
            ring_engine_on(&r1),
            false,
            armed_panics(&pool, &armed, &reading_seen, &ran),
        );
        start_and_abandon_reads(&pool, &hooked, &file);
        assert_eq!(
            hooked.inner.in_flight(),
            READS,
            "{what}: reads not in flight"
        );
        armed.store(true, Ordering::SeqCst);
        // The streams are gone: this is the last handle on the engine.
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(hooked)));
        let p = dropped.expect_err("the hooks' panic did not reach the drop");
        expect_bad_payload(p, &what);
        assert_eq!(ran.load(Ordering::SeqCst), READS, "{what}: hooks that ran");
        in_flight_seen = in_flight_seen.max(reading_seen.load(Ordering::SeqCst));
        assert_idle(&pool, &what);
        assert!(
            (0..N).all(|b| !pool.contains(file.id(), b)),
            "{what}: a cancelled read's block is valid"
        );

        let held = hold_pages_elsewhere(&pool, &other, N, READS, COMBINE);
        assert_unchanged(other_seed, &held, &what);
        drop(held);
        let rt = runtime(false);
        let blocks: Vec<u64> = (0..N).collect();
        rt.block_on(scan_checked(
            &pool,
            engine_on(&rt),
            &file,
            a.seed(),
            source::forward(0..N),
            &blocks,
            &format!("{what}: scan again"),
        ));
    }
    assert!(
        in_flight_seen > 0,
        "no hook ran while other reads were still being read"
    );
}

/// The same reads, on a current-thread runtime that is not driven after
/// they start, when the runtime is dropped: the reaper's drop completes
/// them (blocking), and their hooks panic with payloads whose drop panics.
/// The drop returns; every hook ran, so no read was left behind by the
/// first panic; nothing is in flight, pinned or being read; every frame is
/// then read again for another file and held unchanged.
#[test]
fn hook_panic_in_the_reapers_drop_leaves_no_read_behind() {
    let test = "hook_panic_in_the_reapers_drop_leaves_no_read_behind";
    let r1 = runtime(false);
    let Some(engine) = engine_or_skip(test, &r1) else {
        return;
    };
    let a = StampedFile::new("reaper-drop", N, BS);
    let (other, other_seed) = stamped(N, BS, false);
    let pool = BufferPool::new(N as usize, BS).expect("pool");
    let file = open(a.path(), BS, true).expect("open");
    let armed = Arc::new(AtomicBool::new(false));
    let reading_seen = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let hooked = Hooked::new(
        engine.clone(),
        false,
        armed_panics(&pool, &armed, &reading_seen, &ran),
    );
    start_and_abandon_reads(&pool, &hooked, &file);
    assert_eq!(engine.in_flight(), READS, "reads not in flight");
    armed.store(true, Ordering::SeqCst);
    drop(r1);
    assert_eq!(ran.load(Ordering::SeqCst), READS, "hooks that ran");
    assert_eq!(engine.in_flight(), 0);
    assert!(
        reading_seen.load(Ordering::SeqCst) > 0,
        "no hook ran while other reads were still being read"
    );
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
    let held = hold_pages_elsewhere(&pool, &other, N, READS, COMBINE);
    assert_unchanged(other_seed, &held, "after the reaper's drop");
    drop(held);
}

/// A read's hook panics while the read is copied from the page cache in
/// `start_read` (the engine's default inline `RWF_NOWAIT` attempt on a
/// cached file): the panic reaches the polling task, the engine is left
/// with nothing half-done, and the runtime shuts down (the reaper's drop
/// waits for pushes in progress, of which there must be none left).
#[test]
fn hook_panic_in_an_inline_cached_read_lets_the_runtime_shut_down() {
    let test = "hook_panic_in_an_inline_cached_read_lets_the_runtime_shut_down";
    let rt = runtime(true);
    let Some(engine) = engine_or_skip(test, &rt) else {
        return;
    };
    let n = 64u64;
    let f = StampedFile::new("inline-panic", n, BS);
    std::fs::read(f.path()).expect("read the file into the page cache");
    let file = open(f.path(), BS, false).expect("open");
    let hooked = Hooked::new(
        engine.clone(),
        true,
        Arc::new(|i, _| -> Option<Hook> {
            (i == 2).then(|| -> Hook { Box::new(|_| panic_with_bad_payload()) })
        }),
    );
    let pool = BufferPool::new(256, BS).expect("pool");
    let task = {
        let (pool, hooked, file) = (pool.clone(), hooked.clone(), file.clone());
        rt.spawn(async move {
            let mut s = ReadStream::builder(&pool, hooked, file)
                .max_ios(4)
                .io_combine_limit(4)
                .build(source::forward(0..n))
                .expect("build");
            while let Some(page) = s.next().await {
                page.expect("page");
            }
        })
    };
    let err = rt
        .block_on(task)
        .expect_err("the hook's panic did not reach the polling task");
    assert!(err.is_panic(), "{err}");
    expect_bad_payload(err.into_panic(), test);
    let st = engine.stats();
    assert!(
        st.nowait_full >= 2,
        "the reads were not copied inline: {st:?}"
    );
    within_watchdog(test, move || drop(rt));
    assert_eq!(engine.in_flight(), 0);
    assert_idle(&pool, test);
}
