//! [`UringTokioEngine`] beyond the conformance suite: reads in flight when
//! the runtime shuts down, a task is aborted or a stream is dropped never
//! write into frames after they are handed back (and a runtime shut down
//! finishes them, after which reads fail naming it); `help` completes only
//! its own file's reads and leaves the others to the reaper; an idle engine
//! does no work; many tasks share one pool and one engine; SQPOLL passes
//! the suite; setup errors name their cause; streams are `Send`.

#![cfg(feature = "tokio")]

mod common;

use common::on_tokio::{
    assert_unchanged, engine_on, engine_or_skip, flavour, harness, helping, hold_pages,
    hold_pages_elsewhere, in_help, io_uring_or_skip, join_scans, ring_engine_or_skip, runtime,
    scan_checked, wait_until, Hook, HookFactory, Hooked, WATCHDOG,
};
use common::{assert_idle, evict, one_read_stream, open, poll_once, stamped};
use futures::StreamExt;
use pagestream::testing::conformance::run_all;
use pagestream::testing::{require_named, stamp, SplitMix, StampedFile};
use pagestream::{source, BufferPool, EngineFile, IoEngine, ReadStream};
use pagestream_uring::{UringFile, UringTokioBuilder, UringTokioEngine};
use std::io;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// 16 KiB blocks, 128 to a read: 2 MiB reads, as in `panic_safety.rs`.
const BS: usize = 16 << 10;
const COMBINE: usize = 128;
/// Reads in flight when the runtime shuts down (or the stream goes).
const READS: usize = 64;
/// Blocks those reads cover (128 MiB), and the pool's frames.
const N: u64 = (READS * COMBINE) as u64;

/// The message of a read started after the engine's runtime shut down.
const SHUT_DOWN: &str = "the tokio runtime this UringTokioEngine was built on has shut down";

/// Starts `READS` reads of `COMBINE` blocks through `engine` (blocks
/// `0..N` of `file`, one stream per read: a stream's budget at `max_ios` 0
/// is one read, so together they claim the whole pool, and all their reads
/// are in flight at once) and returns the streams.
async fn start_reads(
    pool: &BufferPool,
    engine: &UringTokioEngine,
    file: &UringFile,
) -> Vec<ReadStream<UringTokioEngine, source::Forward>> {
    let mut streams = Vec::with_capacity(READS);
    for r in 0..READS as u64 {
        let first = r * COMBINE as u64;
        let mut s = one_read_stream(pool, engine.clone(), file, first, COMBINE);
        // Starts the stream's read; a page is not expected this soon, but
        // one would not matter.
        let _ = poll_once(&mut s.next()).await;
        streams.push(s);
    }
    streams
}

/// From a task on `rt`, [`start_reads`] and keeps the streams in that
/// task, which never ends. Returns once every read has been started.
fn start_reads_in_a_task(
    rt: &tokio::runtime::Runtime,
    engine: &UringTokioEngine,
    pool: &BufferPool,
    file: &UringFile,
) {
    let (tx, rx) = futures::channel::oneshot::channel();
    let (engine, pool, file) = (engine.clone(), pool.clone(), file.clone());
    rt.spawn(async move {
        let streams = start_reads(&pool, &engine, &file).await;
        let _ = tx.send(());
        std::future::pending::<()>().await;
        drop(streams);
    });
    rt.block_on(rx).expect("the task starting the reads ended");
}

/// The error of the first page of a stream started through `engine` now.
fn first_read_error(pool: &BufferPool, engine: &UringTokioEngine, file: &UringFile) -> io::Error {
    let mut s = ReadStream::builder(pool, engine.clone(), file.clone())
        .build(source::forward(0..1))
        .expect("build");
    match futures::executor::block_on(s.next()) {
        Some(Err(e)) => e,
        Some(Ok(page)) => panic!("block {} was read; an error was expected", page.block()),
        None => panic!("the stream ended without an item"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shutdown {
    /// `drop(runtime)`: waits for the runtime's threads.
    Drop,
    /// `Runtime::shutdown_background`: does not wait.
    Background,
}

/// `READS` reads of 2 MiB are in flight on a tokio runtime (O_DIRECT, and
/// buffered after the blocks were evicted from the page cache) when the
/// runtime is shut down: the reaper's drop finishes them, so afterwards
/// nothing is in flight, pinned or being read, and every block is valid
/// (except where the kernel fails reads of threads that exited, below).
/// Every frame is then read again for another file and held: no page may
/// change under its guard (a read the kernel was still doing into a frame
/// handed back would change it). A read started afterwards fails with an
/// error naming the shut-down runtime, and never reaches the ring, unless
/// it is buffered and the page cache holds it: then it is copied.
fn shutdown_with_reads_in_flight(test: &str, multi: bool, how: Shutdown) {
    if !io_uring_or_skip(test) {
        return;
    }
    let a = StampedFile::new("shutdown-a", N, BS);
    // Read buffered from the page cache, where writing the file left it: a
    // copy that is over long before reads still at the device would end.
    let (other, other_seed) = stamped(N, BS, false);
    let pool = BufferPool::new(N as usize, BS).expect("pool");
    let mut in_flight_seen = 0;
    for direct in [true, false] {
        let what = format!("{how:?}, {}, direct={direct}", flavour(multi));
        let file = open(a.path(), BS, direct).expect("open");
        if !direct {
            evict(a.path(), N * BS as u64);
        }
        let threads = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let rt = {
            let (started, stopped) = (Arc::clone(&threads), Arc::clone(&threads));
            let mut b = if multi {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                b
            } else {
                tokio::runtime::Builder::new_current_thread()
            };
            b.enable_all()
                .on_thread_start(move || {
                    started.0.fetch_add(1, Ordering::SeqCst);
                })
                .on_thread_stop(move || {
                    stopped.1.fetch_add(1, Ordering::SeqCst);
                })
                .build()
                .expect("tokio runtime")
        };
        let engine = engine_on(&rt);
        start_reads_in_a_task(&rt, &engine, &pool, &file);
        // A buffered read the page cache already holds (the kernel's
        // read-ahead behind an earlier read may have brought its blocks in)
        // is copied as it starts and never reaches the ring.
        let started = engine.stats();
        assert_eq!(
            started.reads + started.nowait_full,
            READS as u64,
            "{what}: not every read was started"
        );
        let at_shutdown = engine.in_flight();
        in_flight_seen = in_flight_seen.max(at_shutdown);
        match how {
            Shutdown::Drop => drop(rt),
            Shutdown::Background => rt.shutdown_background(),
        }
        if multi && how == Shutdown::Background {
            // The workers drop the tasks (the reaper among them) before
            // they stop.
            wait_until(&format!("{what}: the runtime's threads stopped"), || {
                threads.1.load(Ordering::SeqCst) == threads.0.load(Ordering::SeqCst)
            });
        }
        assert_eq!(
            engine.in_flight(),
            0,
            "{what}: reads still in flight after the runtime shut down \
             ({at_shutdown} were at shutdown)"
        );
        assert_idle(&pool, &what);
        let id = file.id();
        let valid = (0..N).filter(|&b| pool.contains(id, b)).count();
        // Not on a multi-thread runtime, buffered: there a read the kernel
        // has not done when the worker thread that submitted it exits
        // fails with EFAULT (io_uring runs a buffered read's retry as task
        // work of the submitting thread, and fails it once that thread is
        // gone), and its blocks are empty again.
        if direct || !multi {
            assert_eq!(valid, N as usize, "{what}: not every read was finished");
        }
        eprintln!(
            "{what}: {at_shutdown} reads in flight at shutdown, then {valid} of {N} blocks valid"
        );
        let reads = engine.stats().reads;

        let held = hold_pages_elsewhere(&pool, &other, N, READS, COMBINE);
        assert_unchanged(other_seed, &held, &what);
        drop(held);

        assert!(!pool.contains(id, 0), "{what}: block 0 was not evicted");
        if !direct {
            // A read the page cache holds needs no ring: it is copied in
            // `start_read`, runtime or not. Once evicted, it needs the ring.
            let mut s = ReadStream::builder(&pool, engine.clone(), file.clone())
                .build(source::forward(0..1))
                .expect("build");
            let page = futures::executor::block_on(s.next()).expect("an item");
            let page = page.unwrap_or_else(|e| panic!("{what}: a cached read failed: {e}"));
            assert!(stamp::check(a.seed(), 0, &page), "{what}: block 0 wrong");
            drop((page, s));
            pool.invalidate(id);
            evict(a.path(), N * BS as u64);
        }
        let e = first_read_error(&pool, &engine, &file);
        assert!(e.to_string().contains(SHUT_DOWN), "{what}: {e}");
        assert_eq!(
            engine.stats().reads,
            reads,
            "{what}: the read was submitted"
        );
        assert_eq!(engine.in_flight(), 0, "{what}");
        assert_idle(&pool, &what);
    }
    assert!(
        in_flight_seen > 0,
        "no round had reads in flight when the runtime shut down"
    );
}

#[test]
fn runtime_dropped_with_reads_in_flight_multi_thread() {
    shutdown_with_reads_in_flight(
        "runtime_dropped_with_reads_in_flight_multi_thread",
        true,
        Shutdown::Drop,
    );
}

#[test]
fn runtime_dropped_with_reads_in_flight_current_thread() {
    shutdown_with_reads_in_flight(
        "runtime_dropped_with_reads_in_flight_current_thread",
        false,
        Shutdown::Drop,
    );
}

#[test]
fn runtime_shut_down_in_background_with_reads_in_flight_multi_thread() {
    shutdown_with_reads_in_flight(
        "runtime_shut_down_in_background_with_reads_in_flight_multi_thread",
        true,
        Shutdown::Background,
    );
}

#[test]
fn runtime_shut_down_in_background_with_reads_in_flight_current_thread() {
    shutdown_with_reads_in_flight(
        "runtime_shut_down_in_background_with_reads_in_flight_current_thread",
        false,
        Shutdown::Background,
    );
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abandon {
    /// The task polling the stream is aborted (`JoinHandle::abort`).
    AbortTask,
    /// The stream is dropped by the task polling it.
    DropStream,
}

/// `READS` streams in a task on a multi-thread runtime, each with a read of
/// 2 MiB in flight (O_DIRECT, and buffered after eviction), are abandoned
/// (dropped by the task, or the task aborted while it waits for a page):
/// their reads all end (through the reaper), leaving nothing pinned or
/// being read; every frame is then read again for another file and held
/// without changing, and another stream reads the abandoned blocks right.
fn abandon_with_reads_in_flight(test: &str, how: Abandon) {
    let rt = runtime(true);
    let Some(engine) = engine_or_skip(test, &rt) else {
        return;
    };
    let a = StampedFile::new("abandon-a", N, BS);
    let (other, other_seed) = stamped(N, BS, false);
    let pool = BufferPool::new(N as usize, BS).expect("pool");
    let blocks: Vec<u64> = (0..N).collect();
    let mut in_flight_seen = 0;
    for direct in [true, false] {
        let what = format!("{how:?}, direct={direct}");
        let file = open(a.path(), BS, direct).expect("open");
        // The previous round's blocks, and the page cache's.
        pool.invalidate(file.id());
        if !direct {
            evict(a.path(), N * BS as u64);
        }
        let (tx, rx) = futures::channel::oneshot::channel();
        let task = {
            let (pool, engine, file) = (pool.clone(), engine.clone(), file.clone());
            rt.spawn(async move {
                let mut streams = start_reads(&pool, &engine, &file).await;
                match how {
                    Abandon::DropStream => {
                        let in_flight = engine.in_flight();
                        drop(streams);
                        let _ = tx.send(in_flight);
                    }
                    Abandon::AbortTask => {
                        let _ = tx.send(0);
                        // Waits for the first stream's page, then forever.
                        let _ = streams[0].next().await;
                        std::future::pending::<()>().await;
                    }
                }
            })
        };
        let sent = rt.block_on(rx).expect("the task starting the reads ended");
        let at = match how {
            Abandon::DropStream => {
                rt.block_on(task).expect("the task dropping the streams");
                sent
            }
            Abandon::AbortTask => {
                let in_flight = engine.in_flight();
                task.abort();
                let r = rt.block_on(task);
                assert!(
                    r.as_ref().is_err_and(|e| e.is_cancelled()),
                    "{what}: the task was not cancelled: {r:?}"
                );
                in_flight
            }
        };
        in_flight_seen = in_flight_seen.max(at);
        eprintln!("{what}: {at} reads in flight when abandoned");
        wait_until(&format!("{what}: the abandoned reads end"), || {
            engine.in_flight() == 0 && pool.stats().reading == 0
        });
        assert_idle(&pool, &what);

        let held = rt.block_on(hold_pages(&pool, engine.clone(), &other, N, READS, COMBINE));
        assert_unchanged(other_seed, &held, &what);
        drop(held);

        let again = format!("{what}: scan after the abandoned streams");
        let st = rt.block_on(scan_checked(
            &pool,
            engine.clone(),
            &file,
            a.seed(),
            source::forward(0..N),
            &blocks,
            &again,
        ));
        assert_eq!(st.pages, N, "{again}: {st}");
    }
    assert!(
        in_flight_seen > 0,
        "no round had reads in flight when the streams were abandoned"
    );
}

#[test]
fn task_aborted_with_reads_in_flight() {
    abandon_with_reads_in_flight("task_aborted_with_reads_in_flight", Abandon::AbortTask);
}

#[test]
fn stream_dropped_with_reads_in_flight() {
    abandon_with_reads_in_flight("stream_dropped_with_reads_in_flight", Abandon::DropStream);
}

/// What one of file B's finish hooks saw: whether it ran inside a `help`
/// call, and the name of its thread.
type Seen = Arc<Mutex<Vec<(bool, Option<String>)>>>;

/// Hooks that record, for every read, what [`Seen`] holds.
fn recording(seen: &Seen) -> HookFactory {
    let seen = Arc::clone(seen);
    Arc::new(move |_, _| -> Option<Hook> {
        let seen = Arc::clone(&seen);
        Some(Box::new(move |_| {
            let name = std::thread::current().name().map(str::to_owned);
            seen.lock().unwrap().push((in_help(), name));
        }))
    })
}

/// A stream of file A helps while reads of file B have completed in the
/// kernel: `IoEngine::help(&engine, &file_a)` takes every completion off
/// the ring (nothing is left in flight) and completes A's read, but runs
/// none of B's hooks. The engine's runtime is not driven meanwhile (a
/// current-thread runtime outside `block_on`: its reaper does not run), so
/// B's reads are then still unfinished. Once the runtime is driven, on a
/// thread of its own, its reaper completes them (B's hooks run there) and
/// wakes B's stream, which is polled on another thread and never helps
/// itself; it reads every page right.
#[test]
fn help_completes_only_its_own_file() {
    let test = "help_completes_only_its_own_file";
    let r1 = runtime(false);
    let Some(engine) = ring_engine_or_skip(test, &r1) else {
        return;
    };
    let bs = 8192;
    let n = 64;
    let (file_a, seed_a) = stamped(n, bs, true);
    let (file_b, seed_b) = stamped(n, bs, false);
    let pool = BufferPool::new(4 * n as usize, bs).expect("pool");
    let seen: Seen = Arc::default();
    // Neither stream helps itself: only the explicit calls below and the
    // reaper complete reads.
    let b_engine = Hooked::new(engine.clone(), false, recording(&seen));
    let a_engine = Hooked::new(engine.clone(), false, Arc::new(|_, _| None));
    let blocks: Vec<u64> = (0..n).collect();

    let (b_done_tx, b_done_rx) = futures::channel::oneshot::channel();
    let b_thread = {
        let (pool, b_engine, blocks) = (pool.clone(), b_engine.clone(), blocks.clone());
        std::thread::spawn(move || {
            let st = futures::executor::block_on(scan_checked(
                &pool,
                b_engine,
                &file_b,
                seed_b,
                source::forward(0..n),
                &blocks,
                "file B",
            ));
            let _ = b_done_tx.send(st);
        })
    };
    wait_until("file B's stream started a read", || b_engine.started() > 0);
    let mut sa = ReadStream::builder(&pool, a_engine.clone(), file_a.clone())
        .max_ios(4)
        .io_combine_limit(4)
        .build(source::forward(0..n))
        .expect("build");
    assert!(
        futures::executor::block_on(poll_once(&mut sa.next())).is_pending(),
        "file A's page came without any help"
    );
    assert!(a_engine.started() > 0, "file A's stream started no read");

    // Until every completion is in and taken (A's read then completed, B's
    // set aside for the reaper).
    let mut a_completed = false;
    wait_until("help took every completion", || {
        a_completed |= helping(|| IoEngine::help(&engine, &file_a));
        engine.in_flight() == 0
    });
    assert!(a_completed, "help completed none of file A's reads");
    assert!(
        seen.lock().unwrap().is_empty(),
        "file B's reads were completed before the reaper ran: {:?}",
        seen.lock().unwrap()
    );
    assert_eq!(b_engine.helps(), 0, "file B's stream helped");

    // Drive the runtime: its reaper finishes B's reads and wakes B's
    // stream; then A's stream reads the rest of A through it.
    let (st, a_pages) = std::thread::Builder::new()
        .name("r1-driver".into())
        .spawn(move || {
            r1.block_on(async {
                let st = tokio::time::timeout(WATCHDOG, b_done_rx)
                    .await
                    .expect("file B's stream was not woken by the reaper")
                    .expect("file B's scan failed");
                let mut a_pages = 0;
                while let Some(page) = tokio::time::timeout(WATCHDOG, sa.next())
                    .await
                    .expect("file A's stream was not woken by the reaper")
                {
                    let page = page.expect("file A's page");
                    assert_eq!(page.block(), a_pages, "file A");
                    assert!(
                        stamp::check(seed_a, a_pages, &page),
                        "file A: block {a_pages}"
                    );
                    a_pages += 1;
                }
                (st, a_pages)
            })
        })
        .expect("spawn")
        .join()
        .expect("driver thread");
    b_thread.join().expect("file B's thread");
    assert_eq!((st.pages, a_pages), (n, n), "{st}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len() as u64, b_engine.started(), "{seen:?}");
    for (inside_help, thread) in &seen {
        assert!(!inside_help, "a hook of file B ran inside help: {seen:?}");
        assert_eq!(
            thread.as_deref(),
            Some("r1-driver"),
            "a hook of file B ran outside the reaper: {seen:?}"
        );
    }
}

/// The same on a live multi-thread runtime: while a task scans file B
/// (O_DIRECT, never helping itself), this thread helps for file A without
/// pause. B's hooks never run inside those calls (the reaper runs them),
/// and B's scan reads every page right.
#[test]
fn help_of_one_file_never_completes_anothers_on_a_live_runtime() {
    let rt = runtime(true);
    let Some(engine) = engine_or_skip(
        "help_of_one_file_never_completes_anothers_on_a_live_runtime",
        &rt,
    ) else {
        return;
    };
    let bs = 8192;
    let n = 2048;
    let (file_a, _) = stamped(1, bs, false);
    let (file_b, seed_b) = stamped(n, bs, true);
    let pool = BufferPool::new(512, bs).expect("pool");
    let seen: Seen = Arc::default();
    let b_engine = Hooked::new(engine.clone(), false, recording(&seen));
    let scan = {
        let pool = pool.clone();
        let b_engine = b_engine.clone();
        rt.spawn(async move {
            let order: Vec<u64> = (0..n).collect();
            scan_checked(
                &pool,
                b_engine,
                &file_b,
                seed_b,
                source::forward(0..n),
                &order,
                "file B",
            )
            .await
        })
    };
    let mut calls = 0u64;
    wait_until("file B's scan ended", || {
        for _ in 0..100 {
            helping(|| IoEngine::help(&engine, &file_a));
            calls += 1;
        }
        scan.is_finished()
    });
    let st = rt.block_on(scan).expect("file B's scan");
    assert_eq!(st.pages, n, "{st}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len() as u64, b_engine.started());
    let inside = seen.iter().filter(|(h, _)| *h).count();
    assert_eq!(
        inside,
        0,
        "{inside} of file B's {} reads completed inside {calls} help calls for file A",
        seen.len()
    );
}

/// A hook that runs the first time it is called: `f`, once.
fn once_hook(f: impl FnOnce() + Send + 'static) -> HookFactory {
    let f = Mutex::new(Some(f));
    Arc::new(move |_, _| -> Option<Hook> {
        let f = f.lock().unwrap().take()?;
        Some(Box::new(move |_| f()))
    })
}

/// The runtime shuts down while another thread's `help` for file X takes
/// the completion of a read of file Y (whose stream, on a thread of its
/// own, helps only itself and waits): the reaper's drop finishes that read
/// too, and Y's stream is woken. Ordered by a hook: the reaper's drop
/// completes a read of file W first, whose hook waits until X's help has
/// taken Y's completion (and set it aside for the reaper, which is then no
/// longer there to be woken).
///
/// The scenario needs Y's read to be still at the device when W's starts
/// and when the reaper's drop first looks: an attempt where the device was
/// faster is run again, up to 10 times.
#[test]
fn shutdown_finishes_reads_another_files_help_set_aside() {
    let test = "shutdown_finishes_reads_another_files_help_set_aside";
    for _ in 0..10 {
        match set_aside_attempt(test) {
            Some(true) => return,
            Some(false) => continue,
            None => return, // no io_uring here
        }
    }
    panic!(
        "{test}: file Y's 32 MiB read was over before the reaper's drop looked, 10 times          (a device too fast for this test)"
    );
}

/// One attempt of [`shutdown_finishes_reads_another_files_help_set_aside`]:
/// `Some(false)` if Y's read ended too early for the scenario, `None`
/// without io_uring.
fn set_aside_attempt(test: &str) -> Option<bool> {
    // Not driven before it is dropped: its reaper first runs in its drop.
    let r1 = runtime(false);
    let engine = ring_engine_or_skip(test, &r1)?;
    let bs = 8192;
    // One 32 MiB O_DIRECT read: still at the device when the reaper's drop
    // first looks at the ring, microseconds after it was started.
    let y_blocks = pagestream::MAX_IO_COMBINE_LIMIT as u64;
    let (file_y, seed_y) = stamped(y_blocks, bs, true);
    // Cached: its read's completion is in as soon as it is submitted.
    let (file_w, _) = stamped(1, bs, false);
    let (file_x, _) = stamped(1, bs, false);
    let pool = BufferPool::new(2 * y_blocks as usize, bs).expect("pool");

    let (y_tx, y_rx) = std::sync::mpsc::channel();
    {
        let (pool, engine) = (pool.clone(), engine.clone());
        std::thread::spawn(move || {
            let order: Vec<u64> = (0..y_blocks).collect();
            let mut s = ReadStream::builder(&pool, engine, file_y)
                .max_ios(1)
                .io_combine_limit(y_blocks as usize)
                .full(true)
                .build(source::forward(0..y_blocks))
                .expect("build");
            let mut i = 0;
            futures::executor::block_on(async {
                while let Some(page) = s.next().await {
                    let ok = page.is_ok_and(|p| {
                        p.block() == order[i] && stamp::check(seed_y, p.block(), &p)
                    });
                    let _ = y_tx.send(ok);
                    i += 1;
                }
            });
        });
    }
    wait_until("file Y's read started", || engine.in_flight() == 1);

    let (in_hook_tx, in_hook_rx) = std::sync::mpsc::channel();
    let (set_aside_tx, set_aside_rx) = std::sync::mpsc::channel::<()>();
    let w_engine = Hooked::new(
        engine.clone(),
        false,
        once_hook(move || {
            let _ = in_hook_tx.send(());
            let _ = set_aside_rx.recv_timeout(WATCHDOG);
        }),
    );
    let mut w = ReadStream::builder(&pool, w_engine, file_w)
        .build(source::forward(0..1))
        .expect("build");
    assert!(futures::executor::block_on(poll_once(&mut w.next())).is_pending());
    if engine.in_flight() != 2 {
        // Y's read is over already (its stream helped itself).
        return Some(false);
    }

    let helper = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            in_hook_rx
                .recv_timeout(WATCHDOG)
                .expect("file W's hook never ran");
            // Y's read is still in the ring's table: the reaper's drop did
            // not take its completion before it completed W's read.
            let before = engine.in_flight();
            wait_until("file X's help took Y's completion", || {
                IoEngine::help(&engine, &file_x);
                engine.in_flight() == 0
            });
            let _ = set_aside_tx.send(());
            before
        })
    };
    drop(r1);
    let before = helper.join().expect("helper thread");
    if before != 1 {
        // Y's read was over before the reaper's drop looked.
        return Some(false);
    }
    let first = y_rx.recv_timeout(WATCHDOG).unwrap_or_else(|e| {
        panic!(
            "file Y's stream was never woken: its read, whose completion X's help \
             set aside as the runtime shut down, was not finished ({e})"
        )
    });
    assert!(first, "file Y's first page is wrong");
    let rest = (1..y_blocks).map(|_| y_rx.recv_timeout(WATCHDOG));
    assert!(rest.into_iter().all(|r| r == Ok(true)), "file Y's pages");
    assert_eq!(engine.in_flight(), 0);
    drop(w);
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
    Some(true)
}

/// Set in the child processes [`child_process`] runs as.
const CHILD: &str = "PAGESTREAM_TOKIO_ENGINE_CHILD";

/// This test binary, run as a child with only [`child_process`] and
/// `CHILD=mode`, which must exit normally; its stdout and stderr.
fn run_child(mode: &str) -> (String, String) {
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, mode)
        .output()
        .expect("run the test binary as a child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child: {}\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// The first line of a child's output that holds `marker`, from the
/// marker on (the harness may have printed the test's name before it).
fn child_line<'a>(stdout: &'a str, marker: &str) -> Option<&'a str> {
    stdout.lines().find_map(|l| Some(&l[l.find(marker)?..]))
}

/// Does nothing unless run as a child by the tests that need a process of
/// their own.
#[test]
fn child_process() {
    match std::env::var(CHILD).as_deref() {
        Ok("idle") => idle_child(),
        Ok("no-io-uring") => no_io_uring_child(),
        _ => {}
    }
}

/// The process's CPU time so far, user and system.
fn cpu_time() -> Duration {
    // SAFETY: `rusage` is plain integers, for which all zeroes is a value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a writable `rusage`, all getrusage writes.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(r, 0, "getrusage: {}", io::Error::last_os_error());
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// How long an idle engine is watched, and the CPU time it may use in that
/// time: a thread spinning would use all of it.
const IDLE: Duration = Duration::from_millis(300);
const IDLE_CPU: Duration = Duration::from_millis(30);

/// In the child (alone in its process, so the process's CPU time is the
/// engine's and the runtime's): for each flavour, an engine scans a file,
/// then the runtime idles inside `block_on`.
fn idle_child() {
    for multi in [true, false] {
        let rt = runtime(multi);
        let engine = engine_on(&rt);
        let n = 256;
        let (file, seed) = stamped(n, 8192, true);
        let pool = BufferPool::new(2 * n as usize, 8192).expect("pool");
        let order: Vec<u64> = (0..n).collect();
        let what = flavour(multi);
        rt.block_on(scan_checked(
            &pool,
            engine.clone(),
            &file,
            seed,
            source::forward(0..n),
            &order,
            what,
        ));
        assert_eq!(engine.in_flight(), 0, "{what}");
        let used = rt.block_on(async {
            let start = cpu_time();
            tokio::time::sleep(IDLE).await;
            cpu_time() - start
        });
        println!("IDLE-CPU {what}: {used:?} in {IDLE:?}");
        assert!(
            used < IDLE_CPU,
            "{what}: an idle engine used {used:?} of CPU in {IDLE:?}"
        );
    }
    println!("IDLE-CHILD-DONE");
}

/// An idle engine (built, a scan finished, then {IDLE} inside the runtime)
/// uses almost no CPU: nothing polls or spins while no read is in flight.
/// Measured in a child process, where nothing else runs.
#[test]
fn idle_engine_uses_no_cpu() {
    if !io_uring_or_skip("idle_engine_uses_no_cpu") {
        return;
    }
    let (stdout, _) = run_child("idle");
    assert!(
        stdout.contains("IDLE-CHILD-DONE"),
        "the child did not measure: {stdout}"
    );
    for line in stdout
        .lines()
        .filter_map(|l| Some(&l[l.find("IDLE-CPU")?..]))
    {
        eprintln!("{line}");
    }
}

/// Blocks of one file in one of three orders, by `i`: forward, backward,
/// or shuffled.
fn order(i: usize, n: u64) -> (&'static str, Vec<u64>) {
    match i % 3 {
        0 => ("forward", (0..n).collect()),
        1 => ("backward", (0..n).rev().collect()),
        _ => {
            let mut v: Vec<u64> = (0..n).collect();
            SplitMix::new(i as u64).shuffle(&mut v);
            ("random", v)
        }
    }
}

/// 32 tasks on a two-worker runtime each scan a file of their own through
/// one engine and one pool a quarter the size of the data (half the files
/// O_DIRECT, half buffered and evicted; forward, backward and random
/// orders): every page is right, frames were reused across files, and
/// nothing is left pinned, being read or in flight.
#[test]
fn thirty_two_tasks_thirty_two_files_one_pool() {
    let rt = runtime(true);
    let Some(engine) = engine_or_skip("thirty_two_tasks_thirty_two_files_one_pool", &rt) else {
        return;
    };
    let (files, n, bs) = (32, 256u64, 8192);
    let pool = BufferPool::new((files * n as usize) / 4, bs).expect("pool");
    // Every file is open until the end: a file closed (and already
    // unlinked) frees its inode, which a file made later may get, and with
    // it the same `FileId`, whose stale pages the pool still holds.
    let opened: Vec<(UringFile, u64, bool)> = (0..files)
        .map(|i| {
            let direct = i % 2 == 1;
            let f = StampedFile::new("tasks", n, bs);
            if !direct {
                evict(f.path(), n * bs as u64);
            }
            let file = open(f.path(), bs, direct).expect("open");
            let seed = f.seed();
            f.remove();
            (file, seed, direct)
        })
        .collect();
    let tasks: Vec<_> = opened
        .iter()
        .enumerate()
        .map(|(i, (file, seed, direct))| {
            let (pattern, blocks) = order(i, n);
            let what = format!("task {i} ({pattern}, direct={direct})");
            let (pool, engine, file, seed) = (pool.clone(), engine.clone(), file.clone(), *seed);
            rt.spawn(async move {
                let src = source::iter(blocks.clone());
                scan_checked(&pool, engine, &file, seed, src, &blocks, &what).await
            })
        })
        .collect();
    let pages: u64 = join_scans(&rt, tasks).iter().map(|st| st.pages).sum();
    assert_eq!(pages, files as u64 * n);
    let ps = pool.stats();
    assert_eq!((ps.pinned, ps.reading), (0, 0), "{ps}");
    assert!(ps.evictions > 0, "no frame was reused: {ps}");
    assert_eq!(engine.in_flight(), 0);
    drop(opened);
}

/// 8 tasks scan one O_DIRECT file at once through one engine and one pool
/// that holds it, each from another place, half of them backward: every
/// page is right, and each block was read from the device once (the
/// others found it in the pool or waited for the read in flight).
#[test]
fn eight_tasks_share_one_files_frames() {
    let rt = runtime(true);
    let Some(engine) = engine_or_skip("eight_tasks_share_one_files_frames", &rt) else {
        return;
    };
    let (tasks, n, bs) = (8u64, 512u64, 8192);
    let (file, seed) = stamped(n, bs, true);
    let pool = BufferPool::new(2 * n as usize, bs).expect("pool");
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let start = i * n / tasks;
            let mut blocks: Vec<u64> = (0..n).map(|b| (b + start) % n).collect();
            if i % 2 == 1 {
                blocks.reverse();
            }
            let what = format!("task {i}");
            let (pool, engine, file) = (pool.clone(), engine.clone(), file.clone());
            rt.spawn(async move {
                let src = source::iter(blocks.clone());
                scan_checked(&pool, engine, &file, seed, src, &blocks, &what).await
            })
        })
        .collect();
    let stats = join_scans(&rt, handles);
    let read: u64 = stats.iter().map(|s| s.blocks_read).sum();
    assert_eq!(
        read,
        n,
        "blocks read from the device by all 8 scans: {:?}",
        stats.iter().map(|s| s.blocks_read).collect::<Vec<_>>()
    );
    let ps = pool.stats();
    assert_eq!(
        (ps.pinned, ps.reading, ps.valid),
        (0, 0, n as usize),
        "{ps}"
    );
}

/// The conformance suite on an engine whose submission queue a kernel
/// thread polls (SQPOLL), from tasks of a multi-thread runtime, buffered
/// and O_DIRECT.
#[test]
fn sqpoll_conformance_multi_thread() {
    for direct in [false, true] {
        let rt = runtime(true);
        let Some(engine) = require_named(
            "sqpoll_conformance_multi_thread",
            "io_uring with SQPOLL",
            rt.block_on(async { UringTokioEngine::builder().sqpoll(100).build() }),
        ) else {
            return;
        };
        let name = format!(
            "uring-tokio SQPOLL multi-thread {}",
            if direct { "O_DIRECT" } else { "buffered" }
        );
        let h = harness(engine.clone(), direct, &name);
        rt.block_on(async move {
            tokio::spawn(async move { run_all(&h).await })
                .await
                .expect("conformance task")
        });
        let st = engine.stats();
        assert!(st.reads > 0 && st.bytes > 0, "{name}: {st:?}");
        drop(rt);
        assert_eq!(engine.in_flight(), 0, "{name}");
    }
}

/// Outside any tokio runtime (and without a handle), building fails with an
/// error saying so, not a panic; zero entries are refused with
/// `InvalidInput` naming the setting, inside a runtime or not.
#[test]
fn setup_errors_name_their_cause() {
    for e in [
        UringTokioEngine::new().expect_err("built outside a runtime"),
        UringTokioEngine::builder()
            .build()
            .expect_err("built outside a runtime"),
    ] {
        assert!(e.to_string().contains("outside a tokio runtime"), "{e}");
    }
    let rt = runtime(false);
    let zero: [UringTokioBuilder; 2] = [
        UringTokioEngine::builder().entries(0),
        UringTokioEngine::builder()
            .entries(0)
            .handle(rt.handle().clone()),
    ];
    for b in zero {
        let e = b.build().expect_err("zero entries must be refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("entries"), "{e}");
    }
    let e = rt
        .block_on(async { UringTokioEngine::builder().entries(0).build() })
        .expect_err("zero entries must be refused");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
}

/// `AUDIT_ARCH_*` of this target (`linux/audit.h`): what a seccomp filter
/// compares `seccomp_data.arch` with.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Installs a seccomp filter on this thread (and the threads it starts)
/// under which `io_uring_setup` fails with `EPERM`, as a container
/// runtime's default profile does; every other system call is allowed.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn deny_io_uring_setup() -> io::Result<()> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let mut filter = [
        stmt(load, std::mem::offset_of!(libc::seccomp_data, arch) as u32),
        // Another architecture's system call numbers mean other calls.
        jeq(AUDIT_ARCH, 1, 0),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
        stmt(load, std::mem::offset_of!(libc::seccomp_data, nr) as u32),
        jeq(libc::SYS_io_uring_setup as u32, 0, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integers only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `prog` points to `filter`, both alive for the call; the
    // kernel copies the program.
    if unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// In the child: with `io_uring_setup` denied, building the engine fails;
/// prints the error for the parent.
fn no_io_uring_child() {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        if let Err(e) = deny_io_uring_setup() {
            println!("SECCOMP-UNAVAILABLE: {e}");
            return;
        }
        let rt = runtime(false);
        let e = rt
            .block_on(async { UringTokioEngine::new() })
            .expect_err("io_uring_setup is denied: the engine must not build");
        println!("NO-IO-URING kind={:?}: {e}", e.kind());
    }
}

/// Where io_uring is unavailable (here: a seccomp filter denies
/// `io_uring_setup`, in a child process), building the engine fails with a
/// `PermissionDenied` error that says io_uring is unavailable and names
/// the fallback, `pagestream-threadpool`; the child exits normally.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn io_uring_unavailable_names_the_fallback() {
    let test = "io_uring_unavailable_names_the_fallback";
    let (stdout, stderr) = run_child("no-io-uring");
    if let Some(line) = child_line(&stdout, "SECCOMP-UNAVAILABLE") {
        let _: Option<()> = require_named(test, "seccomp filters", Err(line));
        return;
    }
    let line = child_line(&stdout, "NO-IO-URING")
        .unwrap_or_else(|| panic!("the child printed no error: {stdout}\n{stderr}"));
    assert!(line.contains("kind=PermissionDenied"), "{line}");
    for part in [
        "io_uring is unavailable",
        "seccomp",
        "pagestream-threadpool",
    ] {
        assert!(line.contains(part), "no {part:?} in: {line}");
    }
}

fn assert_send<T: Send>() {}
fn assert_sync<T: Sync>() {}
fn assert_clone<T: Clone>() {}

/// Streams built with the engine are `Send` (they move between worker
/// threads), and the engine is a `Send + Sync + Clone` handle. Checked at
/// compile time: this does not build otherwise.
#[test]
fn streams_and_engine_are_send() {
    assert_send::<ReadStream<UringTokioEngine, source::Forward>>();
    assert_send::<ReadStream<UringTokioEngine, source::Iter<std::vec::IntoIter<u64>>>>();
    assert_send::<UringTokioEngine>();
    assert_sync::<UringTokioEngine>();
    assert_clone::<UringTokioEngine>();
    assert_send::<UringTokioBuilder>();
}
