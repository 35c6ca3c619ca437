//! `pagestream-bench soak`: many streams sharing a small pool over a real
//! file, on one runtime after another, for a set time, with random
//! cancels, drops, resets, timeouts and closes; every page verified, the
//! process's RSS and open file descriptors sampled.
//!
//! Each of `--streams` workers runs sessions back to back until the time is
//! up. A session opens the file (buffered or `O_DIRECT`, where the runtime
//! takes both), draws a block list (a forward or backward run, a random
//! order, sparse ascending blocks, or a list with repeats), draws the
//! stream's settings (`max_ios` 0–16, `io_combine_limit` 1–16, the fast
//! path, `full`, a gap limit 0–3) and one fate:
//!
//! - `complete`: every page, to the end;
//! - `drop`: dropped after some pages, reads still in flight;
//! - `reset`: reset to another list after some pages, then to the end;
//! - `timeout`: each page awaited against a timer of 10 µs to 5 ms; the
//!   stream is dropped the first time the timer wins;
//! - `close`: `close().await` after some pages;
//! - `hold`: up to 4 guards kept across later pages, and past the stream's
//!   drop, then checked again.
//!
//! Every page handed out must be the next block of the list, with that
//! block's stamp; a session that ends normally must have seen its whole
//! list. The only error accepted is [`ReadError::PoolExhausted`] (64
//! streams on a small pool may find every frame pinned), after which the
//! same block must come next. Every 5 s the file is dropped from the OS
//! page cache, so buffered sessions read from the device too. At the end,
//! with every stream and guard gone and the reads of dropped streams
//! ended, no frame may be pinned or being read, and a scan of the whole
//! file through the pool must find every page right.
//!
//! Fails (exit 1) on a wrong page, a lost page, another error, a hang (no
//! page anywhere for 60 s), file descriptors left open after the runtime
//! has stopped and its engine's last reads have ended (10 s at most; but
//! for glommio's own executor eventfd, which glommio 0.9 leaks), or RSS grown by more than 10% + 8 MiB from the first to the
//! last part of a run of a minute or more.

use crate::args::{format_size, UsageError};
use crate::cache;
use futures::future::{self, Either};
use futures::StreamExt;
use pagestream::testing::{stamp, SplitMix, ThreadTimer, Timer};
use pagestream::{source, BufferPool, ReadError, ReadStream};
use pagestream_runtimes::{Env, FileOptions, Runtime, Workload};
use serde_json::json;
use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `soak`'s options.
#[derive(Debug, Clone)]
pub struct SoakOpts {
    /// `--runtime`.
    pub runtimes: Vec<Runtime>,
    /// `--duration`: per runtime.
    pub duration: Duration,
    /// `--streams`.
    pub streams: usize,
    /// `--pool-frames`.
    pub frames: usize,
    /// `--size`: the data file's size.
    pub size: u64,
    /// `--block-size`.
    pub block_size: usize,
    /// `--seed`.
    pub seed: u64,
    /// `--json`.
    pub json: bool,
}

/// How a session ends (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Complete,
    Drop,
    Reset,
    Timeout,
    Close,
    Hold,
}

const FATES: [Fate; 6] = [
    Fate::Complete,
    Fate::Drop,
    Fate::Reset,
    Fate::Timeout,
    Fate::Close,
    Fate::Hold,
];

impl Fate {
    fn name(self) -> &'static str {
        match self {
            Fate::Complete => "complete",
            Fate::Drop => "drop",
            Fate::Reset => "reset",
            Fate::Timeout => "timeout",
            Fate::Close => "close",
            Fate::Hold => "hold",
        }
    }
}

/// What one runtime's soak did.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Sessions by fate, in [`FATES`] order.
    sessions: [u64; 6],
    /// Pages handed out, each checked.
    pub pages: u64,
    /// Guards checked again after later pages (and their stream's drop).
    held_checked: u64,
    /// `PoolExhausted` errors (then retried).
    exhausted: u64,
    /// Timers that won against a page.
    timeouts: u64,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        for (a, b) in self.sessions.iter_mut().zip(o.sessions) {
            *a += b;
        }
        self.pages += o.pages;
        self.held_checked += o.held_checked;
        self.exhausted += o.exhausted;
        self.timeouts += o.timeouts;
    }

    /// Sessions of every fate.
    pub fn sessions(&self) -> u64 {
        self.sessions.iter().sum()
    }
}

/// One runtime's result: the tally and the process's samples.
#[derive(Debug, Clone)]
pub struct SoakResult {
    /// The runtime.
    pub runtime: Runtime,
    /// What the streams did.
    pub tally: Tally,
    /// Wall time.
    pub elapsed: Duration,
    /// RSS (KiB) before the runtime started.
    pub rss_start: u64,
    /// Largest RSS (KiB) in the first tenth of the run (after the first
    /// second), and in the last tenth.
    pub rss_early: u64,
    /// See `rss_early`.
    pub rss_late: u64,
    /// Largest RSS (KiB) seen.
    pub rss_max: u64,
    /// Open file descriptors before the runtime started, and after it
    /// stopped (glommio's run leaves one more: [`GLOMMIO_EVENTFD`]).
    pub fds_start: usize,
    /// See `fds_start`.
    pub fds_end: usize,
}

/// The process's resident set (KiB), from `/proc/self/status`.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// What the process's open file descriptors name (`/proc/self/fd`, less
/// the one reading it), sorted.
fn open_fds() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .map(|t| t.display().to_string())
                .filter(|t| !t.starts_with("/proc/"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The descriptors open in `after` and not in `before` (as multisets).
fn left_open(before: &[String], mut after: Vec<String>) -> Vec<String> {
    for b in before {
        if let Some(i) = after.iter().position(|a| a == b) {
            after.remove(i);
        }
    }
    after
}

/// glommio 0.9 leaks its executor's eventfd when the executor ends
/// (glommio issue 448): one per run, not pagestream's.
const GLOMMIO_EVENTFD: &str = "anon_inode:[eventfd]";

/// A stamped data file of `size` bytes for the soak, removed on drop.
struct DataFile {
    path: PathBuf,
    seed: u64,
    nblocks: u64,
}

impl DataFile {
    fn create(dir: &Path, size: u64, block_size: usize, seed: u64) -> io::Result<DataFile> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!(
            "soak-{}-{seed}-{}.dat",
            format_size(size),
            std::process::id()
        ));
        let nblocks = size / block_size as u64;
        let stamp_seed = 0x50AC ^ seed;
        let mut w = io::BufWriter::new(std::fs::File::create(&path)?);
        let mut page = vec![0u8; block_size];
        for b in 0..nblocks {
            stamp::fill(stamp_seed, b, &mut page);
            io::Write::write_all(&mut w, &page)?;
        }
        w.into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .sync_all()?;
        Ok(DataFile {
            path,
            seed: stamp_seed,
            nblocks,
        })
    }
}

impl Drop for DataFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs the soak on every runtime of `o`, printing a line (or a JSON
/// object) per runtime; an error names the runtime and what went wrong.
pub fn run(o: &SoakOpts) -> io::Result<Vec<SoakResult>> {
    let dir = crate::data::data_dir();
    let data = DataFile::create(&dir, o.size, o.block_size, o.seed)?;
    let mut results = Vec::new();
    for &rt in &o.runtimes {
        let r = soak_one(o, rt, &data)
            .map_err(|e| io::Error::new(e.kind(), format!("soak on {rt}: {e}")))?;
        print(o, &r);
        results.push(r);
    }
    Ok(results)
}

fn print(o: &SoakOpts, r: &SoakResult) {
    let t = &r.tally;
    if o.json {
        let mut fates = serde_json::Map::new();
        for (f, n) in FATES.iter().zip(t.sessions) {
            fates.insert(f.name().into(), json!(n));
        }
        println!(
            "{}",
            json!({
                "runtime": r.runtime.name(),
                "seconds": r.elapsed.as_secs_f64(),
                "streams": o.streams,
                "pool_frames": o.frames,
                "file_bytes": o.size,
                "block_size": o.block_size,
                "seed": o.seed,
                "sessions": t.sessions(),
                "fates": fates,
                "pages_verified": t.pages,
                "held_guards_checked": t.held_checked,
                "timeouts": t.timeouts,
                "pool_exhausted": t.exhausted,
                "rss_kib_start": r.rss_start,
                "rss_kib_early": r.rss_early,
                "rss_kib_late": r.rss_late,
                "rss_kib_max": r.rss_max,
                "fds_start": r.fds_start,
                "fds_end": r.fds_end,
            })
        );
    } else {
        let fates: Vec<String> = FATES
            .iter()
            .zip(t.sessions)
            .map(|(f, n)| format!("{} {n}", f.name()))
            .collect();
        println!(
            "{:<12} {:>6.0} s  {} pages verified, {} sessions ({}), {} timeouts, {} pool exhausted; \
             RSS {} -> {} -> {} MiB (max {}), fds {} -> {}",
            r.runtime.name(),
            r.elapsed.as_secs_f64(),
            t.pages,
            t.sessions(),
            fates.join(", "),
            t.timeouts,
            t.exhausted,
            r.rss_start / 1024,
            r.rss_early / 1024,
            r.rss_late / 1024,
            r.rss_max / 1024,
            r.fds_start,
            r.fds_end,
        );
    }
}

/// The sampler's view of the run.
struct Progress {
    /// Pages handed out so far (all streams).
    pages: AtomicU64,
    /// The workload has returned.
    done: AtomicBool,
}

fn soak_one(o: &SoakOpts, rt: Runtime, data: &DataFile) -> io::Result<SoakResult> {
    let fds_before = open_fds();
    let rss_start = rss_kib();
    let progress = Arc::new(Progress {
        pages: AtomicU64::new(0),
        done: AtomicBool::new(false),
    });
    // Object-store reads the file from nginx on loopback.
    let server = if rt.reads_urls() {
        Some(
            pagestream_object_store::testing::Nginx::start(
                data.path.parent().expect("a directory"),
            )
            .map_err(|e| io::Error::new(e.kind(), format!("starting nginx: {e}")))?,
        )
    } else {
        None
    };
    let target = match &server {
        Some(s) => PathBuf::from(s.url(&data.path.file_name().unwrap().to_string_lossy())),
        None => data.path.clone(),
    };
    let work = Soak {
        path: target,
        stamp_seed: data.seed,
        nblocks: data.nblocks,
        block_size: o.block_size,
        streams: o.streams,
        frames: o.frames,
        duration: o.duration,
        seed: o.seed
            ^ rt.name()
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31) ^ u64::from(b)),
        buffered: rt.supports_buffered(),
        direct: rt.supports_direct(),
        progress: Arc::clone(&progress),
    };
    let start = Instant::now();
    let sampler = {
        let progress = Arc::clone(&progress);
        let path = data.path.clone();
        let duration = o.duration;
        std::thread::spawn(move || sample(&progress, &path, start, duration))
    };
    let outcome = rt.run(work);
    progress.done.store(true, Ordering::Release);
    let samples = sampler.join().expect("the sampler does not panic");
    let elapsed = start.elapsed();
    drop(server);
    let tally = outcome.map_err(io::Error::other)??;
    // Reads of streams dropped mid-read may still be ending on an engine's
    // threads (the thread pool's), holding the file for a moment.
    let leaked_now = |after: &[String]| {
        let mut leaked = left_open(&fds_before, after.to_vec());
        if rt == Runtime::Glommio {
            if let Some(i) = leaked.iter().position(|t| t == GLOMMIO_EVENTFD) {
                leaked.remove(i);
            }
        }
        leaked
    };
    let settle = Instant::now();
    let mut fds_after = open_fds();
    while !leaked_now(&fds_after).is_empty() && settle.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
        fds_after = open_fds();
    }
    let leaked = leaked_now(&fds_after);
    let tenth = |from: Duration, to: Duration| {
        samples
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .map(|(_, r)| *r)
            .max()
            .unwrap_or(0)
    };
    let r = SoakResult {
        runtime: rt,
        rss_early: tenth(
            Duration::from_secs(1),
            elapsed / 10 + Duration::from_secs(1),
        ),
        rss_late: tenth(elapsed - elapsed / 10, elapsed),
        rss_max: samples.iter().map(|s| s.1).max().unwrap_or(0),
        tally,
        elapsed,
        rss_start,
        fds_start: fds_before.len(),
        fds_end: fds_after.len(),
    };
    if !leaked.is_empty() {
        return Err(io::Error::other(format!(
            "file descriptors left open after the runtime stopped: {}",
            leaked.join(", ")
        )));
    }
    if o.duration >= Duration::from_secs(60) && r.rss_late > r.rss_early + r.rss_early / 10 + 8192 {
        return Err(io::Error::other(format!(
            "RSS grew from {} KiB early in the run to {} KiB at its end",
            r.rss_early, r.rss_late
        )));
    }
    Ok(r)
}

/// Samples RSS every 100 ms until the workload is done, drops the file
/// from the page cache every 5 s, and ends the process if no page has been
/// handed out for 60 s (a hang). Returns `(time since start, RSS KiB)`.
fn sample(
    progress: &Progress,
    path: &Path,
    start: Instant,
    duration: Duration,
) -> Vec<(Duration, u64)> {
    let file = std::fs::File::open(path).ok();
    let mut samples = Vec::new();
    let mut last_evict = Instant::now();
    let (mut last_pages, mut last_change) = (0, Instant::now());
    while !progress.done.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        samples.push((start.elapsed(), rss_kib()));
        if last_evict.elapsed() >= Duration::from_secs(5) {
            if let Some(f) = &file {
                let _ = cache::evict(f);
            }
            last_evict = Instant::now();
        }
        let pages = progress.pages.load(Ordering::Relaxed);
        if pages != last_pages {
            (last_pages, last_change) = (pages, Instant::now());
        } else if last_change.elapsed() >= Duration::from_secs(60)
            && start.elapsed() < duration + Duration::from_secs(60)
        {
            eprintln!(
                "pagestream-bench: error: soak: no page for 60 s after {pages} pages: a hang"
            );
            std::process::exit(1);
        }
    }
    samples
}

/// The workload: `streams` workers on one pool.
struct Soak {
    path: PathBuf,
    stamp_seed: u64,
    nblocks: u64,
    block_size: usize,
    streams: usize,
    frames: usize,
    duration: Duration,
    seed: u64,
    buffered: bool,
    direct: bool,
    progress: Arc<Progress>,
}

impl Workload for Soak {
    type Output = io::Result<Tally>;

    async fn run<E: Env>(self, env: E) -> io::Result<Tally> {
        let pool = BufferPool::new(self.frames, self.block_size)?;
        let timer = ThreadTimer::new();
        let deadline = Instant::now() + self.duration;
        let workers = (0..self.streams as u64).map(|i| {
            let rng = SplitMix::new(self.seed ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03));
            worker(&self, &env, &pool, &timer, rng, deadline)
        });
        let mut total = Tally::default();
        for t in future::join_all(workers).await {
            total.add(&t?);
        }
        // The reads of streams dropped mid-read end on their own.
        let settle = Instant::now();
        while pool.stats().reading > 0 && settle.elapsed() < Duration::from_secs(10) {
            let _ = sleep(&timer, Duration::from_millis(1)).await;
        }
        let ps = pool.stats();
        if ps.pinned != 0 || ps.reading != 0 {
            return Err(io::Error::other(format!(
                "every stream and guard gone, yet frames are left pinned or being read: {ps}"
            )));
        }
        // Every frame is reusable and every page the pool kept is right:
        // one scan of the whole file through it.
        let opts = if self.buffered {
            FileOptions::buffered(self.block_size)
        } else {
            FileOptions::direct(self.block_size)
        };
        let file = env.open(&self.path, opts).await?;
        let mut all = ReadStream::builder(&pool, env.engine(), file)
            .build(source::forward(0..self.nblocks))
            .map_err(io::Error::other)?;
        for b in 0..self.nblocks {
            let page = all
                .next()
                .await
                .ok_or_else(|| io::Error::other(format!("the final scan ended at block {b}")))??;
            check_page(page.block(), b, self.stamp_seed, &page, "the final scan")?;
            total.pages += 1;
        }
        Ok(total)
    }
}

/// A future that resolves after `d`, on `timer`'s thread.
fn sleep(timer: &ThreadTimer, d: Duration) -> futures::channel::oneshot::Receiver<()> {
    let (tx, rx) = futures::channel::oneshot::channel();
    timer.at(
        Instant::now() + d,
        Box::new(move || {
            let _ = tx.send(());
        }),
    );
    rx
}

/// A block list drawn for a session.
fn blocks(rng: &mut SplitMix, nblocks: u64) -> Vec<u64> {
    let len = 1 + rng.below(nblocks.min(512));
    let start = rng.below(nblocks - len + 1);
    match rng.below(5) {
        0 => (start..start + len).collect(),
        1 => (start..start + len).rev().collect(),
        2 => {
            let mut v: Vec<u64> = (start..start + len).collect();
            rng.shuffle(&mut v);
            v
        }
        3 => (start..nblocks)
            .filter(|_| rng.below(4) == 0)
            .take(len as usize)
            .collect(),
        _ => (0..len).map(|_| start + rng.below(len)).collect(),
    }
}

/// Checks a page: the expected block, with its stamp.
fn check_page(block: u64, want: u64, stamp_seed: u64, page: &[u8], what: &str) -> io::Result<()> {
    if block != want {
        return Err(io::Error::other(format!(
            "{what}: got block {block} where block {want} was due"
        )));
    }
    if !stamp::check(stamp_seed, block, page) {
        return Err(io::Error::other(format!(
            "{what}: block {block} does not hold its own bytes (stamp of block {:?})",
            stamp::block_of(page)
        )));
    }
    Ok(())
}

async fn worker<E: Env>(
    s: &Soak,
    env: &E,
    pool: &BufferPool,
    timer: &ThreadTimer,
    mut rng: SplitMix,
    deadline: Instant,
) -> io::Result<Tally> {
    let mut t = Tally::default();
    let pages = Cell::new(0u64);
    while Instant::now() < deadline {
        let direct = match (s.buffered, s.direct) {
            (true, true) => rng.below(2) == 0,
            (b, _) => !b,
        };
        let opts = if direct {
            FileOptions::direct(s.block_size)
        } else {
            FileOptions::buffered(s.block_size)
        };
        let file = env.open(&s.path, opts).await?;
        let fate = FATES[rng.below(FATES.len() as u64) as usize];
        let mut list = blocks(&mut rng, s.nblocks);
        let mut stream = ReadStream::builder(pool, env.engine(), file)
            .max_ios(rng.below(17) as usize)
            .io_combine_limit(1 + rng.below(16) as usize)
            .fast_path(rng.below(2) == 0)
            .full(rng.below(4) == 0)
            .gap_limit(rng.below(4) as usize)
            .build(source::iter(list.clone()))
            .map_err(io::Error::other)?;
        // Stop after this many pages (drop, reset, close, timeout: no
        // stop).
        let stop_after = match fate {
            Fate::Drop | Fate::Reset | Fate::Close => rng.below(list.len() as u64 + 1),
            _ => u64::MAX,
        };
        let mut held = VecDeque::new();
        let mut next = 0usize;
        let mut reset_done = false;
        let mut close = false;
        let what = |b: &str| format!("{fate:?} session ({} streams): {b}", s.streams);
        loop {
            if next as u64 == stop_after && !(fate == Fate::Reset && reset_done) {
                match fate {
                    Fate::Reset => {
                        list = blocks(&mut rng, s.nblocks);
                        stream.reset(source::iter(list.clone()));
                        next = 0;
                        reset_done = true;
                        continue;
                    }
                    Fate::Close => {
                        close = true;
                        break;
                    }
                    _ => break,
                }
            }
            let item = if fate == Fate::Timeout {
                let wait = Duration::from_micros((10 + rng.below(10)) << rng.below(9));
                match future::select(stream.next(), sleep(timer, wait)).await {
                    Either::Left((item, _)) => item,
                    Either::Right(_) => {
                        t.timeouts += 1;
                        break;
                    }
                }
            } else {
                stream.next().await
            };
            let Some(item) = item else {
                if next != list.len() {
                    return Err(io::Error::other(what(&format!(
                        "the stream ended after {next} of {} blocks",
                        list.len()
                    ))));
                }
                break;
            };
            let page = match item {
                Ok(p) => p,
                Err(e)
                    if matches!(
                        ReadError::from_io(&e),
                        Some(ReadError::PoolExhausted { .. })
                    ) =>
                {
                    t.exhausted += 1;
                    continue;
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        what(&format!("block {}: {e}", list[next.min(list.len() - 1)])),
                    ))
                }
            };
            let Some(&want) = list.get(next) else {
                return Err(io::Error::other(what(&format!(
                    "block {} handed out after the list's {} blocks",
                    page.block(),
                    list.len()
                ))));
            };
            check_page(page.block(), want, s.stamp_seed, &page, &what("page"))?;
            next += 1;
            t.pages += 1;
            pages.set(pages.get() + 1);
            if pages.get() % 64 == 0 {
                s.progress.pages.fetch_add(64, Ordering::Relaxed);
            }
            if fate == Fate::Hold && rng.below(2) == 0 {
                held.push_back((want, page));
                if held.len() > 4 {
                    let (b, g) = held.pop_front().expect("held");
                    check_page(g.block(), b, s.stamp_seed, &g, &what("held guard"))?;
                    t.held_checked += 1;
                }
            }
        }
        if close {
            stream.close().await;
        } else {
            drop(stream);
        }
        // Guards outlive their stream: still pinned, still right.
        for (b, g) in held.drain(..) {
            check_page(
                g.block(),
                b,
                s.stamp_seed,
                &g,
                &what("guard kept past its stream"),
            )?;
            t.held_checked += 1;
        }
        t.sessions[FATES.iter().position(|&f| f == fate).expect("a fate")] += 1;
    }
    s.progress
        .pages
        .fetch_add(pages.get() % 64, Ordering::Relaxed);
    Ok(t)
}

/// Checks soak's flags.
pub fn check(o: &SoakOpts) -> Result<(), UsageError> {
    crate::args::check_block_size(o.block_size, o.size)?;
    if o.streams == 0 {
        return Err(UsageError("--streams must be at least 1".into()));
    }
    if o.frames < 16 {
        return Err(UsageError("--pool-frames must be at least 16".into()));
    }
    Ok(())
}
