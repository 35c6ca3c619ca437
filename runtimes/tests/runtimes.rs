//! Running workloads through `pagestream-runtimes`: outputs come back,
//! borrowed inputs work, panics reach the caller, glommio refuses buffered
//! files with a clear error, and every runtime reads the same pages, also
//! in a task spawned on the workers where the runtime spawns. A
//! runtime that cannot start here (io_uring unavailable, `RLIMIT_MEMLOCK`
//! too low) is skipped, or fails under `CI=true` (see [`starts`]).

use futures::StreamExt;
use pagestream::testing::{require, stamp, StampedFile};
use pagestream::{source, BufferPool, EngineFile, ReadStream};
use pagestream_runtimes::{Env, FileOptions, Runtime, SendEnv, SpawnWorkload, Workload};
use std::io;
use std::path::{Path, PathBuf};

/// Scans every block; returns (pages, sum of the blocks' stamp check
/// results, thread name it ran on).
struct Scan<'a> {
    path: &'a Path,
    seed: u64,
    direct: bool,
}

impl Workload for Scan<'_> {
    type Output = io::Result<(u64, String)>;

    async fn run<E: Env>(self, env: E) -> io::Result<(u64, String)> {
        let file = env
            .open(
                self.path,
                FileOptions {
                    direct: self.direct,
                    block_size: 8192,
                },
            )
            .await?;
        let nblocks = file.byte_len()? / 8192;
        let pool = BufferPool::new(64, 8192)?;
        let mut pages = ReadStream::builder(&pool, env.engine(), file)
            .max_ios(4)
            .io_combine_limit(8)
            .build(source::forward(0..nblocks))?;
        let mut n = 0;
        while let Some(page) = pages.next().await {
            let page = page?;
            assert!(stamp::check(self.seed, n, &page), "block {n}");
            n += 1;
        }
        let st = pages.close().await;
        assert_eq!(st.blocks_read, nblocks);
        let thread = std::thread::current().name().unwrap_or("").to_string();
        Ok((n, thread))
    }
}

#[test]
fn every_runtime_reads_every_page_on_its_own_thread() {
    let tmp = StampedFile::with_seed("scan", 42, 100, 8192);
    let path = tmp.path();
    for rt in Runtime::ALL.into_iter().filter(|&rt| starts(rt)) {
        for direct in [false, true] {
            let r = rt
                .run(Scan {
                    path,
                    seed: 42,
                    direct,
                })
                .expect("runtime starts");
            if !direct && !rt.supports_buffered() {
                let e = r.unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{rt}: {e}");
                assert!(e.to_string().contains("O_DIRECT"), "{rt}: {e}");
                continue;
            }
            let (pages, thread) = r.unwrap_or_else(|e| panic!("{rt} direct={direct}: {e}"));
            assert_eq!(pages, 100, "{rt} direct={direct}");
            assert_eq!(thread, format!("pagestream-{rt}"));
        }
    }
    tmp.remove();
}

/// [`Scan`] as a spawned workload: owns its path; opens with
/// `open_blocking`, as a spawned workload does.
struct SpawnedScan {
    path: PathBuf,
    seed: u64,
    direct: bool,
}

impl SpawnWorkload for SpawnedScan {
    type Output = io::Result<(u64, String)>;

    async fn run<E: SendEnv>(self, env: E) -> io::Result<(u64, String)> {
        let opts = FileOptions {
            direct: self.direct,
            block_size: 8192,
        };
        let file = env.open_blocking(&self.path, opts)?;
        let nblocks = file.byte_len()? / 8192;
        let pool = BufferPool::new(64, 8192)?;
        let mut pages = ReadStream::builder(&pool, env.engine(), file)
            .max_ios(4)
            .io_combine_limit(8)
            .build(source::forward(0..nblocks))?;
        let mut n = 0;
        while let Some(page) = pages.next().await {
            let page = page?;
            assert!(stamp::check(self.seed, n, &page), "block {n}");
            n += 1;
            // Let the task move between workers mid-scan.
            tokio::task::yield_now().await;
        }
        let st = pages.close().await;
        assert_eq!(st.blocks_read, nblocks);
        let thread = std::thread::current().name().unwrap_or("").to_string();
        Ok((n, thread))
    }
}

#[test]
fn spawning_runtimes_read_every_page_in_a_task_on_their_workers() {
    let tmp = StampedFile::with_seed("spawned", 43, 100, 8192);
    for rt in Runtime::ALL.into_iter().filter(|&rt| starts(rt)) {
        for direct in [false, true] {
            let r = rt.spawn(SpawnedScan {
                path: tmp.path().to_path_buf(),
                seed: 43,
                direct,
            });
            if !rt.spawns() {
                let e = r.expect_err("only spawning runtimes spawn");
                assert_eq!(e.runtime, rt);
                assert_eq!(e.source.kind(), io::ErrorKind::Unsupported, "{e}");
                assert!(e.to_string().contains("run_with"), "{e}");
                break;
            }
            let (pages, thread) = r
                .expect("runtime starts")
                .unwrap_or_else(|e| panic!("{rt} direct={direct}: {e}"));
            assert_eq!(pages, 100, "{rt} direct={direct}");
            assert_eq!(thread, format!("pagestream-{rt}-worker"));
        }
    }
    tmp.remove();
}

struct SpawnedPanics;

impl SpawnWorkload for SpawnedPanics {
    type Output = ();

    async fn run<E: SendEnv>(self, env: E) {
        panic!("spawned workload panicked on {}", env.runtime());
    }
}

#[test]
fn a_panic_in_a_spawned_workload_reaches_the_caller() {
    for rt in Runtime::ALL
        .into_iter()
        .filter(|&rt| rt.spawns() && starts(rt))
    {
        let payload =
            std::panic::catch_unwind(|| rt.spawn(SpawnedPanics)).expect_err("the panic propagates");
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert_eq!(msg, format!("spawned workload panicked on {rt}"));
    }
}

struct Panics;

impl Workload for Panics {
    type Output = ();

    async fn run<E: Env>(self, env: E) {
        panic!("workload panicked on {}", env.runtime());
    }
}

/// Does nothing.
struct Nothing;

impl Workload for Nothing {
    type Output = ();

    async fn run<E: Env>(self, _env: E) {}
}

/// Whether `rt` starts here; when it does not, says so (see
/// [`require`]: under `CI=true` that panics).
fn starts(rt: Runtime) -> bool {
    require(&format!("the {rt} runtime"), rt.run(Nothing)).is_some()
}

#[test]
fn a_panic_in_the_workload_reaches_the_caller() {
    for rt in Runtime::EVERY.into_iter().filter(|&rt| starts(rt)) {
        let r = std::panic::catch_unwind(|| rt.run(Panics));
        let payload = r.expect_err("the panic propagates");
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert_eq!(msg, format!("workload panicked on {rt}"));
    }
}

/// Opens `path` with `open_blocking` (the synchronous open a conformance
/// harness uses); returns its length.
struct OpenBlocking<'a>(&'a Path);

impl Workload for OpenBlocking<'_> {
    type Output = io::Result<u64>;

    async fn run<E: Env>(self, env: E) -> io::Result<u64> {
        env.open_blocking(self.0, FileOptions::buffered(8192))?
            .byte_len()
    }
}

#[test]
fn object_store_reads_urls_and_refuses_local_paths_and_o_direct() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("runtimes-object-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let local = dir.join("t.dat");
    pagestream::testing::files::write_stamped(&local, 42, 100, 8192);
    let rt = Runtime::ObjectStore;
    assert!(!Runtime::ALL.contains(&rt) && Runtime::EVERY.contains(&rt));

    // A local path is not a URL: an error naming it, whichever open.
    let e = rt
        .run(Scan {
            path: &local,
            seed: 42,
            direct: false,
        })
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains(local.to_str().unwrap()), "{e}");
    assert!(rt.run(OpenBlocking(&local)).unwrap().is_err());

    if let Some(nginx) = require(
        "nginx",
        pagestream_object_store::testing::Nginx::start(&dir),
    ) {
        let url = nginx.url("t.dat");
        let url = Path::new(&url);
        let (pages, thread) = rt
            .run(Scan {
                path: url,
                seed: 42,
                direct: false,
            })
            .unwrap()
            .unwrap();
        assert_eq!(pages, 100);
        assert_eq!(thread, "pagestream-object-store");
        assert_eq!(rt.run(OpenBlocking(url)).unwrap().unwrap(), 100 * 8192);
        // O_DIRECT means nothing for an object.
        let e = rt
            .run(Scan {
                path: url,
                seed: 42,
                direct: true,
            })
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
        assert!(e.to_string().contains("O_DIRECT"), "{e}");
        // A missing object: NotFound, naming its URL.
        let missing = nginx.url("missing.dat");
        let e = rt
            .run(OpenBlocking(Path::new(&missing)))
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        assert!(e.to_string().contains(&missing), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens the file five times (`O_DIRECT`, so reads take a device's time)
/// and drops each stream after its first page, with up to 16 reads in
/// flight.
struct DropMidRead<'a> {
    path: &'a Path,
    seed: u64,
}

impl Workload for DropMidRead<'_> {
    type Output = io::Result<()>;

    async fn run<E: Env>(self, env: E) -> io::Result<()> {
        let pool = BufferPool::new(256, 8192)?;
        for i in 0..5 {
            let file = env.open(self.path, FileOptions::direct(8192)).await?;
            let mut pages = ReadStream::builder(&pool, env.engine(), file)
                .max_ios(16)
                .io_combine_limit(1)
                .full(true)
                .build(source::forward(i * 40..i * 40 + 40))?;
            let page = pages.next().await.expect("a page")?;
            assert!(stamp::check(self.seed, i * 40, &page));
        }
        Ok(())
    }
}

/// Descriptors of this process open on `path`.
fn open_on(path: &Path) -> usize {
    let path = path.canonicalize().expect("the file exists");
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| *target == path)
        .count()
}

/// A stream dropped with reads in flight as the workload ends leaves no
/// descriptor of its file open once the runtime has stopped and those
/// reads have ended (glommio leaks the tasks of reads still in flight when
/// its executor ends, and closes a dropped file only on its next I/O
/// cycle: its runtime waits for both). The thread pool's reads end on its
/// I/O threads, which may still hold the file for a moment after the
/// runtime returns: the test waits up to 10 s for the count to reach 0.
#[test]
fn no_runtime_leaves_a_file_open_after_streams_dropped_mid_read() {
    let tmp = StampedFile::with_seed("dropped-mid-read", 7, 200, 8192);
    for rt in Runtime::ALL.into_iter().filter(|&rt| starts(rt)) {
        rt.run(DropMidRead {
            path: tmp.path(),
            seed: 7,
        })
        .unwrap()
        .unwrap();
        let t = std::time::Instant::now();
        while open_on(tmp.path()) > 0 && t.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(open_on(tmp.path()), 0, "{rt}: the file is still open");
    }
}
