//! `seqscan`: a sequential scan of a stamped data file through a
//! pagestream [`ReadStream`] on each runtime (thread pool, tokio-uring,
//! glommio, uring, uring-tokio, via `pagestream-runtimes`), cold, warm and
//! hot, beside a plain
//! 128 KiB `read` loop over the same file.
//!
//! ```text
//! cargo run --release --bin seqscan -- [--runtime NAME|all] [--cache cold|warm|hot|all] [--repeat N] [--json] …
//! ```
//!
//! The scans are one workload ([`Workload`]) written once against
//! `pagestream_runtimes::Env` and run on every runtime named by `--runtime`
//! (default `all`), one runtime after the other (all repeats and modes of
//! one runtime, then the next). glommio reads with `O_DIRECT` only: its cold
//! runs use `O_DIRECT` (with or without `--direct`), its warm runs are
//! skipped (reported on stderr with the reason: warm means the OS page
//! cache, which `O_DIRECT` bypasses), its hot runs fill the pool with
//! `O_DIRECT` reads.
//!
//! - **cold**: the file is fsynced and evicted from the OS page cache
//!   (`POSIX_FADV_DONTNEED`); residency is checked with `mincore` and the run
//!   refused if more than 1% is resident.
//! - **warm**: the file is evicted, then read whole in order into the page
//!   cache (checked resident), then scanned; a
//!   plain `read` loop over 128 KiB buffers (`read-loop` row) runs beside it,
//!   alternating which goes first.
//! - **hot**: a pool holding the whole file is filled by one scan, then
//!   scans are timed with the stream's page prefetch on and off (`--prefetch`;
//!   the next queued page's first two and last cache lines are prefetched
//!   when a page is handed out), beside a `memory` row that iterates the
//!   same pages in one 4096-aligned buffer without a stream, alternating
//!   which goes first. They must do no reads. The summary gives each hot
//!   scan's overhead per page over the memory loop, in ns.
//!
//! - **none**: the file as it is (nothing evicted or read first).
//!
//! Cold and warm scans use PostgreSQL 18's BULKREAD ring (`RingSize::BULKREAD`) when the
//! file is larger than a quarter of the pool. Every run computes the same
//! order-independent checksum over (block number, first and last 64 bytes)
//! of each page; differing checksums are an error.
//!
//! `--file` may name an object instead (`s3://bucket/key`,
//! `http(s)://host/path`): it is read by the `object-store` runtime
//! ([`pagestream_bench::object`]), in the states that apply to it, `none`
//! (every block from the server into an empty pool) and `hot`, with the
//! engine's request size and GETs in flight unless `--combine` and
//! `--max-ios` say otherwise.

use clap::ArgAction;
use futures::StreamExt;
use pagestream::{source, BufferPool, ReadStream, RingSize, StreamStats};
use pagestream_bench::args::{
    self, at_least_one, check_block_size, check_combine, check_max_ios, format_size, number,
    parse_block_size, parse_on_off, parse_ring, parse_runtimes, parse_size, List, UsageError,
};
use pagestream_bench::cache::{self, Cache};
use pagestream_bench::checksum::Checksum;
use pagestream_bench::data::FileArgs;
use pagestream_bench::object::{self, combine_for, max_ios_for, not_for_url, NO_DIRECT};
use pagestream_bench::timing::{mib_per_s, print_summary, JsonObject, Spread};
use pagestream_runtimes::{EngineCounters, Env, FileOptions, Options, Runtime, Workload};
use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;
use std::time::Instant;

const USAGE: &str = "\
usage: seqscan [options]

Scans a stamped data file sequentially through a pagestream ReadStream on each
runtime: cold (evicted from the page cache), warm (in the page cache, beside a
plain 128 KiB read loop) and hot (in the buffer pool). --file may name an
object (s3://bucket/key, http(s)://host/path) instead: see below.

options:
  --runtime NAME      threadpool | tokio-uring | glommio | uring | uring-tokio
                      | all, or a
                      comma-separated list (default all; object-store for a
                      URL); glommio reads with O_DIRECT only: its cold runs
                      use O_DIRECT, its warm runs are skipped
  --file PATH|URL     data file (default target/pagestream-data/
                      seqscan-<size>.dat, created, stamped, if absent), or
                      an object URL
  --create            with --file: create PATH (stamped, --size bytes) if it
                      does not exist; without it a missing PATH is an error
  --size SIZE         size of a file to create (default 1GiB; e.g. 256MiB)
  --cache MODE        none | cold | warm | hot | all (default all: cold, warm,
                      hot; none: the file as it is)
  --direct            open the file with O_DIRECT (no warm runs)
  --max-ios N         reads in flight at most (default 16; 64 for a URL)
  --combine N         io_combine_limit, blocks per read (default 16; 4MiB of
                      blocks for a URL)
  --pool-frames N     buffer pool frames for cold/warm runs (default 16384;
                      hot uses a pool holding the whole file)
  --block-size SIZE   block size (default 8KiB)
  --ring SIZE|auto|off  ring for cold/warm scans (default auto: PostgreSQL 18's
                      BULKREAD ring, 256KiB plus max-ios reads, when the file
                      is larger than a quarter of the pool)
  --baseline-buffer SIZE  read-loop buffer (default 128KiB)
  --no-read-loop      skip the read-loop baseline in warm runs
  --prefetch on|off|both  page prefetch when a page is handed out (default:
                      hot runs both, one after the other; cold/warm on, the
                      library's default)
  --no-memory-loop    skip the in-memory baseline in hot runs
  --repeat N          runs of each mode (default 1; with more, medians)
  --nowait on|off     threadpool, uring, uring-tokio: inline RWF_NOWAIT attempt
                      for buffered reads (default on)
  --threads N         threadpool: I/O threads (default 16)
  --cached-depth N    threadpool: cached reads in flight per stream, shared
                      with the cached-read helper thread (default 6 with 2+
                      CPUs; 0 or 1: no helper, each cached read inline)
  --json              one JSON object per run on stdout instead of the table
  --help              this text

object URLs (--file s3://bucket/key or http(s)://host/path):
  read by the object-store runtime (range GETs; --runtime may be left out or
  say object-store, any other runtime is an error). s3:// takes its endpoint
  and credentials from AWS_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
  AWS_REGION and AWS_ALLOW_HTTP. --cache none | hot (default both: none reads
  every block from the server into an empty pool); cold and warm are OS page
  cache states, which an object is not read through: an error, as are
  --direct and --create. No read-loop or memory-loop baseline (they read a
  local file). --nowait, --threads and --cached-depth (local engine settings)
  and --size (a file to create) are not used.";

/// The cache states seqscan measures (`--cache all`).
const ALL: [Cache; 3] = [Cache::Cold, Cache::Warm, Cache::Hot];

/// `--ring`: `None` is auto, `Some(0)` off.
type RingSetting = Option<usize>;

#[derive(Debug, clap::Parser)]
struct Opts {
    /// `--runtime` as given (`None`: all, or object-store for a URL).
    #[arg(long = "runtime", value_parser = parse_runtimes)]
    runtime: Option<List<Runtime>>,
    /// The runtimes to run (set by `check`).
    #[arg(skip)]
    runtimes: List<Runtime>,
    #[command(flatten)]
    data: FileArgs,
    /// `--cache` as given (`None`: all, or none and hot for a URL).
    #[arg(long = "cache", value_parser = |s: &str| {
        Cache::parse(s, &[Cache::None, Cache::Cold, Cache::Warm, Cache::Hot], Some(&ALL))
    })]
    cache: Option<List<Cache>>,
    /// The cache states to run (set by `check`).
    #[arg(skip)]
    modes: Vec<Cache>,
    #[arg(long)]
    direct: bool,
    /// `--max-ios` as given (`None`: the file's default).
    #[arg(long = "max-ios", value_parser = number::<usize>)]
    max_ios_given: Option<usize>,
    /// Reads in flight (set by `check`).
    #[arg(skip)]
    max_ios: usize,
    /// `--combine` as given (`None`: the file's default).
    #[arg(long = "combine", value_parser = number::<usize>)]
    combine_given: Option<usize>,
    /// `io_combine_limit` (set by `check`).
    #[arg(skip)]
    combine: usize,
    #[arg(long, value_parser = number::<usize>)]
    pool_frames: Option<usize>,
    #[arg(long, default_value = "8KiB", value_parser = parse_block_size)]
    block_size: usize,
    #[arg(long, default_value = "1", value_parser = number::<usize>)]
    repeat: usize,
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    nowait: bool,
    #[arg(long, default_value_t = pagestream_threadpool::DEFAULT_THREADS, value_parser = number::<usize>)]
    threads: usize,
    /// Thread pool cached-read depth (`None`: the engine's default).
    #[arg(long, value_parser = number::<usize>)]
    cached_depth: Option<usize>,
    #[arg(long)]
    json: bool,
    #[arg(long, default_value = "auto", value_parser = parse_ring)]
    ring: RingSetting,
    #[arg(long, default_value = "128KiB", value_parser = |s: &str| {
        let v = parse_size(s)?;
        match usize::try_from(v) {
            Ok(v) if v > 0 && v <= 1 << 30 => Ok(v),
            _ => Err(format!("{s:?}: expected a size from 1 byte to 1GiB")),
        }
    })]
    baseline_buffer: usize,
    #[arg(long = "no-read-loop", action = ArgAction::SetFalse)]
    read_loop: bool,
    /// Prefetch settings to run (hot: each; cold/warm: the first).
    #[arg(long, default_value = "both", value_parser = |s: &str| match s {
        "both" => Ok(vec![true, false]),
        _ => parse_on_off(s).map(|on| vec![on]),
    })]
    prefetch: List<bool>,
    #[arg(long = "no-memory-loop", action = ArgAction::SetFalse)]
    memory_loop: bool,
}

/// The checks across flags; sets `runtimes`, `modes`, `max_ios` and
/// `combine`.
fn check(mut o: Opts) -> Result<Opts, UsageError> {
    o.data.check()?;
    let url = o.data.url().map(str::to_owned);
    o.runtimes = object::runtimes_for(o.data.file.as_deref(), o.runtime.take(), &Runtime::ALL)?;
    at_least_one("repeat", o.repeat)?;
    at_least_one("threads", o.threads)?;
    check_block_size(o.block_size, o.data.size)?;
    o.combine = combine_for(url.is_some(), o.combine_given, o.block_size);
    o.max_ios = max_ios_for(url.is_some(), o.max_ios_given);
    check_combine(o.combine)?;
    check_max_ios(o.max_ios)?;
    if let Some(f) = o.pool_frames {
        at_least_one("pool-frames", f)?;
    }
    match &url {
        Some(url) => {
            if o.direct {
                return Err(not_for_url("--direct", url, NO_DIRECT));
            }
            o.modes = object::url_modes(url, o.cache.take(), &[Cache::None, Cache::Hot])?;
            // The baselines read a local file.
            o.memory_loop = false;
            o.read_loop = false;
        }
        None => o.modes = cache::check_modes(o.direct, o.cache.take(), &ALL, &o.runtimes)?,
    }
    Ok(o)
}

/// Whether scans on `rt` open the file with O_DIRECT.
fn direct_on(o: &Opts, rt: Runtime) -> bool {
    o.direct || !rt.supports_buffered()
}

/// One timed run.
struct Run {
    runtime: &'static str,
    direct: bool,
    nowait: bool,
    mode: Cache,
    rep: usize,
    pages: u64,
    bytes: u64,
    seconds: f64,
    reads: u64,
    mean_blocks_per_read: f64,
    hits: u64,
    max_in_flight: u64,
    resident_before: f64,
    checksum: u64,
    stats: Option<StreamStats>,
    engine: Option<EngineCounters>,
    pool_frames: usize,
    ring_frames: usize,
    /// Pool frames holding a block after the run, evictions, ring reuses.
    pool: Option<(usize, u64, u64)>,
    /// Read-loop only: seconds inside `read` calls.
    read_call_seconds: Option<f64>,
    /// Hot stream runs: whether page prefetch was on.
    prefetch: Option<bool>,
}

impl Run {
    fn label(&self) -> String {
        match (self.runtime, self.prefetch) {
            ("read-loop" | "memory", _) => self.runtime.into(),
            (rt, Some(true)) => format!("{rt} {} prefetch", self.mode.name()),
            (rt, Some(false)) => format!("{rt} {} no-prefetch", self.mode.name()),
            (rt, None) => format!("{rt} {}", self.mode.name()),
        }
    }

    fn json(&self, o: &Opts, path: &str) -> JsonObject {
        let mut j = JsonObject::default();
        j.set("runtime", self.runtime)
            .set("cache", self.mode.name())
            .set("direct", self.direct)
            .set("pages", self.pages)
            .set("bytes", self.bytes)
            .set("seconds", self.seconds)
            .set("mib_per_s", mib_per_s(self.bytes, self.seconds))
            .set("pages_per_s", self.pages as f64 / self.seconds)
            .set("reads", self.reads)
            .set("mean_blocks_per_read", self.mean_blocks_per_read)
            .set("hits", self.hits)
            .set("max_in_flight", self.max_in_flight)
            .set("resident_before", self.resident_before)
            .set("checksum", self.checksum)
            .set("run", self.rep)
            .set("file", path)
            .set("block_size", o.block_size)
            .set("max_ios", o.max_ios)
            .set("io_combine_limit", o.combine)
            .set("pool_frames", self.pool_frames)
            .set("ring_frames", self.ring_frames)
            .set("nowait", self.nowait);
        if let Some(s) = &self.stats {
            j.set("blocks_read", s.blocks_read)
                .set("cached_reads", s.cached_reads)
                .set("max_blocks_per_read", s.max_blocks_per_read)
                .set("waits", s.waits)
                .set("wait_seconds", s.wait_time.as_secs_f64())
                .set("mean_distance", s.mean_distance())
                .set("mean_pinned", s.mean_pinned())
                .set("max_distance", s.max_distance)
                .set("advice", s.advice)
                .set("fast_path_pages", s.fast_path_pages);
        }
        if let Some(t) = self.read_call_seconds {
            j.set("read_call_seconds", t);
        }
        // Hot runs say which setting they timed; the other stream runs use
        // the first `--prefetch` setting.
        if !matches!(self.runtime, "read-loop" | "memory") {
            j.set("prefetch", self.prefetch.unwrap_or(o.prefetch[0]));
        }
        if let Some((valid, ev, ring)) = self.pool {
            j.set("pool_valid", valid)
                .set("pool_evictions", ev)
                .set("pool_ring_reuses", ring);
        }
        if let Some(e) = &self.engine {
            // `engine_<counter>`; durations as `engine_<name>_seconds`.
            for &(name, v) in &e.0 {
                match name.strip_suffix("_nanos") {
                    Some(stem) => j.set(&format!("engine_{stem}_seconds"), v as f64 / 1e9),
                    None => j.set(&format!("engine_{name}"), v),
                };
            }
        }
        j
    }
}

/// What the scans on every runtime share: the options, the file, and a
/// buffered handle for cache control and the read loop.
struct Shared {
    o: Opts,
    path: PathBuf,
    path_s: String,
    nblocks: u64,
    /// A buffered handle for cache control and the read loop (`None` for
    /// an object URL).
    plain: Option<File>,
    /// The file's bytes in one buffer and where its 4096-aligned part
    /// starts, for the hot memory loop (loaded once).
    memory: std::sync::OnceLock<(Vec<u8>, usize)>,
}

impl Shared {
    fn bytes(&self) -> u64 {
        self.nblocks * self.o.block_size as u64
    }

    /// Prints a finished run (a table row, or one JSON line).
    fn emit(&self, r: &Run) {
        if self.o.json {
            println!("{}", r.json(&self.o, &self.path_s).to_line());
        } else {
            print_row(r);
        }
    }

    /// The local file's handle (cold, warm and the read loop, which `check`
    /// refuses for a URL).
    fn plain(&self) -> io::Result<&File> {
        self.plain.as_ref().ok_or_else(|| {
            io::Error::other(format!(
                "{}: an object has no OS page cache to prepare",
                self.path_s
            ))
        })
    }

    /// The fraction of the file in the OS page cache (0 for an object).
    fn resident(&self) -> io::Result<f64> {
        self.plain
            .as_ref()
            .map_or(Ok(0.0), cache::resident_fraction)
    }

    /// Evicts the file from the page cache; returns the fraction resident.
    fn make_cold(&self) -> io::Result<f64> {
        cache::make_cold(self.plain()?, &self.path)
    }

    fn make_warm(&self) -> io::Result<f64> {
        cache::make_warm(self.plain()?, &self.path)
    }

    /// The hot baseline: the same checksum over the file's pages held in
    /// one 4096-aligned buffer (as pool frames are), no stream.
    fn memory_loop(&self, rep: usize) -> io::Result<Run> {
        let bs = self.o.block_size;
        let len = usize::try_from(self.bytes())
            .map_err(|_| io::Error::other("file too large for the memory loop"))?;
        if self.memory.get().is_none() {
            let mut buf = vec![0u8; len + 4096];
            let start = buf.as_ptr().align_offset(4096);
            let mut f = File::open(&self.path)?;
            f.read_exact(&mut buf[start..start + len])?;
            let _ = self.memory.set((buf, start));
        }
        let (buf, start) = self.memory.get().expect("loaded above");
        let pages = &buf[*start..*start + len];
        let t = Instant::now();
        let mut ck = Checksum::default();
        for (b, page) in pages.chunks_exact(bs).enumerate() {
            ck.add(b as u64, page);
        }
        let secs = t.elapsed().as_secs_f64();
        Ok(Run {
            runtime: "memory",
            direct: false,
            nowait: false,
            mode: Cache::Hot,
            rep,
            pages: ck.pages,
            bytes: ck.pages * bs as u64,
            seconds: secs,
            reads: 0,
            mean_blocks_per_read: 0.0,
            hits: 0,
            max_in_flight: 0,
            resident_before: 1.0,
            checksum: ck.sum,
            stats: None,
            engine: None,
            pool_frames: 0,
            ring_frames: 0,
            pool: None,
            read_call_seconds: None,
            prefetch: None,
        })
    }

    /// The baseline: `read` into one 128 KiB buffer, same checksum.
    fn read_loop(&self, rep: usize) -> io::Result<Run> {
        let resident = self.make_warm()?;
        let bs = self.o.block_size;
        let mut buf = vec![0u8; self.o.baseline_buffer.div_ceil(bs) * bs];
        let mut f = File::open(&self.path)?;
        let limit = self.bytes();
        let start = Instant::now();
        let mut ck = Checksum::default();
        let mut reads = 0u64;
        let mut in_read = std::time::Duration::ZERO;
        let mut off = 0u64;
        while off < limit {
            // Fill the buffer (a short read continues into it).
            let want = (buf.len() as u64).min(limit - off) as usize;
            let mut got = 0;
            while got < want {
                let t = Instant::now();
                let r = f.read(&mut buf[got..want]);
                in_read += t.elapsed();
                match r {
                    Ok(0) => break,
                    Ok(n) => {
                        got += n;
                        reads += 1;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if got < want {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{} shrank during the read loop", self.path.display()),
                ));
            }
            let first = off / bs as u64;
            for (i, page) in buf[..got].chunks_exact(bs).enumerate() {
                ck.add(first + i as u64, page);
            }
            off += got as u64;
        }
        let secs = start.elapsed().as_secs_f64();
        Ok(Run {
            runtime: "read-loop",
            direct: false,
            nowait: false,
            mode: Cache::Warm,
            rep,
            pages: ck.pages,
            bytes: ck.pages * bs as u64,
            seconds: secs,
            reads,
            mean_blocks_per_read: ck.pages as f64 / reads.max(1) as f64,
            hits: 0,
            max_in_flight: 1,
            resident_before: resident,
            checksum: ck.sum,
            stats: None,
            engine: None,
            pool_frames: 0,
            ring_frames: 0,
            pool: None,
            read_call_seconds: Some(in_read.as_secs_f64()),
            prefetch: None,
        })
    }
}

/// The scans of one runtime: every repeat of every mode that runs on it, as
/// one workload run by `pagestream-runtimes`.
struct Scans<'a> {
    shared: &'a Shared,
    runtime: Runtime,
    /// This runtime's warm runs also run the read-loop baseline (one
    /// runtime does, so there is one read-loop row per repeat).
    read_loop: bool,
    /// Likewise for the hot runs' memory loop.
    memory_loop: bool,
}

impl Workload for Scans<'_> {
    type Output = io::Result<Vec<Run>>;

    async fn run<E: Env>(self, env: E) -> io::Result<Vec<Run>> {
        let sh = self.shared;
        let mut on = OnRuntime {
            sh,
            env: &env,
            rt: self.runtime,
            direct: direct_on(&sh.o, self.runtime),
            hot: None,
        };
        let mut runs = Vec::new();
        for rep in 0..sh.o.repeat {
            for &mode in &sh.o.modes {
                if !mode.runs_on(self.runtime) {
                    continue;
                }
                let batch = match mode {
                    Cache::None => vec![on.as_is(rep).await?],
                    Cache::Cold => vec![on.cold(rep).await?],
                    Cache::Warm if !(sh.o.read_loop && self.read_loop) => {
                        vec![on.warm_stream(rep).await?]
                    }
                    Cache::Warm if rep % 2 == 0 => {
                        let b = sh.read_loop(rep)?;
                        sh.emit(&b);
                        vec![b, on.warm_stream(rep).await?]
                    }
                    Cache::Warm => {
                        let w = on.warm_stream(rep).await?;
                        sh.emit(&w);
                        vec![w, sh.read_loop(rep)?]
                    }
                    Cache::Hot => {
                        // Memory loop and each prefetch setting, the order
                        // reversed every other repeat; all but the last row
                        // are printed here.
                        let mut order: Vec<Option<bool>> = Vec::new();
                        if sh.o.memory_loop && self.memory_loop {
                            order.push(None);
                        }
                        order.extend(sh.o.prefetch.iter().map(|&p| Some(p)));
                        if rep % 2 == 1 {
                            order.reverse();
                        }
                        let mut batch = Vec::new();
                        for (i, which) in order.iter().enumerate() {
                            let r = match which {
                                None => sh.memory_loop(rep)?,
                                Some(p) => on.hot(rep, *p).await?,
                            };
                            if i + 1 < order.len() {
                                sh.emit(&r);
                            }
                            batch.push(r);
                        }
                        batch
                    }
                };
                if let Some(last) = batch.last() {
                    sh.emit(last);
                }
                runs.extend(batch);
            }
        }
        Ok(runs)
    }
}

/// Scans on one runtime's environment.
struct OnRuntime<'a, E: Env> {
    sh: &'a Shared,
    env: &'a E,
    rt: Runtime,
    /// Files are opened with O_DIRECT (`--direct`, or glommio).
    direct: bool,
    /// The hot pool, filled once.
    hot: Option<BufferPool>,
}

impl<E: Env> OnRuntime<'_, E> {
    async fn open(&self) -> io::Result<E::File> {
        let opts = FileOptions {
            direct: self.direct,
            block_size: self.sh.o.block_size,
        };
        self.env.open(&self.sh.path, opts).await
    }

    /// Scans every block with a stream over `pool`; returns the checksum,
    /// the seconds it took and the stream's stats.
    async fn stream_scan(
        &self,
        pool: &BufferPool,
        ring: Option<RingSize>,
        prefetch: bool,
    ) -> io::Result<(Checksum, f64, StreamStats, usize)> {
        let file = self.open().await?;
        let o = &self.sh.o;
        let mut stream = ReadStream::builder(pool, self.env.engine(), file)
            .max_ios(o.max_ios)
            .io_combine_limit(o.combine)
            .ring(ring)
            .prefetch(prefetch)
            .build(source::forward(0..self.sh.nblocks))
            .map_err(io::Error::from)?;
        let start = Instant::now();
        let mut ck = Checksum::default();
        while let Some(page) = stream.next().await {
            let page = page?;
            ck.add(page.block(), &page);
        }
        let secs = start.elapsed().as_secs_f64();
        // The ring's frames at the end (it grows past its first size when
        // the look-ahead is deeper), 0 without one.
        let ring_frames = stream.ring_len().unwrap_or(0);
        Ok((ck, secs, stream.close().await, ring_frames))
    }

    /// Cold or warm stream run.
    async fn scan_run(&self, mode: Cache, rep: usize, resident: f64) -> io::Result<Run> {
        let o = &self.sh.o;
        let frames = o.pool_frames.unwrap_or(16384);
        let ring = match o.ring {
            None if self.sh.nblocks > frames as u64 / 4 => Some(RingSize::BULKREAD),
            None | Some(0) => None,
            Some(b) => Some(RingSize::Bytes(b)),
        };
        // Without a ring the scan fills every frame: map them now, outside
        // the timing, as a long-lived pool would be (a ring maps its few
        // frames on its first lap).
        let pool = BufferPool::builder()
            .frames(frames)
            .block_size(o.block_size)
            .prefault(ring.is_none())
            .build()
            .map_err(io::Error::from)?;
        let before = self.env.engine_counters();
        let (ck, secs, st, ring_frames) = self.stream_scan(&pool, ring, o.prefetch[0]).await?;
        let eng = self.env.engine_counters().since(&before);
        let mut run = self.stream_run(mode, rep, resident, ck, secs, st, eng, frames, ring_frames);
        let ps = pool.stats();
        run.pool = Some((ps.valid, ps.evictions, ps.ring_reuses));
        Ok(run)
    }

    #[allow(clippy::too_many_arguments)]
    fn stream_run(
        &self,
        mode: Cache,
        rep: usize,
        resident: f64,
        ck: Checksum,
        secs: f64,
        st: StreamStats,
        eng: EngineCounters,
        frames: usize,
        ring_frames: usize,
    ) -> Run {
        Run {
            runtime: self.rt.name(),
            direct: self.direct,
            nowait: matches!(
                self.rt,
                Runtime::ThreadPool | Runtime::Uring | Runtime::UringTokio
            ) && self.sh.o.nowait
                && !self.direct,
            mode,
            rep,
            pages: ck.pages,
            bytes: ck.pages * self.sh.o.block_size as u64,
            seconds: secs,
            reads: st.reads,
            mean_blocks_per_read: st.mean_blocks_per_read(),
            hits: st.hits,
            max_in_flight: st.max_in_flight,
            resident_before: resident,
            checksum: ck.sum,
            stats: Some(st),
            engine: Some(eng),
            pool_frames: frames,
            ring_frames,
            pool: None,
            read_call_seconds: None,
            prefetch: None,
        }
    }

    async fn cold(&self, rep: usize) -> io::Result<Run> {
        let resident = self.sh.make_cold()?;
        self.scan_run(Cache::Cold, rep, resident).await
    }

    /// The file as it is (an object: every block from the server).
    async fn as_is(&self, rep: usize) -> io::Result<Run> {
        let resident = self.sh.resident()?;
        self.scan_run(Cache::None, rep, resident).await
    }

    async fn warm_stream(&self, rep: usize) -> io::Result<Run> {
        let resident = self.sh.make_warm()?;
        self.scan_run(Cache::Warm, rep, resident).await
    }

    async fn hot(&mut self, rep: usize, prefetch: bool) -> io::Result<Run> {
        let nblocks = self.sh.nblocks;
        let frames = usize::try_from(nblocks)
            .map_err(|_| io::Error::other("file too large for a hot pool"))?;
        if self.hot.is_none() {
            let pool = BufferPool::new(frames, self.sh.o.block_size).map_err(io::Error::from)?;
            // Fill it: one scan, no ring.
            let (_, _, st, _) = self.stream_scan(&pool, None, false).await?;
            if st.pages != nblocks {
                return Err(io::Error::other("prewarm scan ended early"));
            }
            self.hot = Some(pool);
        }
        let pool = self.hot.clone().expect("hot pool");
        let resident = self.sh.resident()?;
        let before = self.env.engine_counters();
        let (ck, secs, st, _) = self.stream_scan(&pool, None, prefetch).await?;
        let eng = self.env.engine_counters().since(&before);
        if st.blocks_read != 0 {
            return Err(io::Error::other(format!(
                "hot scan read {} blocks: the pool of {frames} frames did not keep the file",
                st.blocks_read
            )));
        }
        let mut run = self.stream_run(Cache::Hot, rep, resident, ck, secs, st, eng, frames, 0);
        run.prefetch = Some(prefetch);
        Ok(run)
    }
}

fn print_row(r: &Run) {
    println!(
        "{:<12} {:<12} {:>3} {:>8.3} {:>9.1} {:>11.0} {:>7} {:>8.2} {:>8} {:>8} {:>8.3} {:>20}",
        r.runtime,
        match r.prefetch {
            Some(true) => "hot+prefetch",
            _ => r.mode.name(),
        },
        r.rep,
        r.seconds,
        mib_per_s(r.bytes, r.seconds),
        r.pages as f64 / r.seconds,
        r.reads,
        r.mean_blocks_per_read,
        r.hits,
        r.max_in_flight,
        r.resident_before,
        r.checksum
    );
    if let Some(t) = r.read_call_seconds {
        println!("    {:.1} ms in read() calls", t * 1e3);
    }
    if let Some(st) = &r.stats {
        for line in st.to_string().lines() {
            println!("    {line}");
        }
        if let Some(e) = &r.engine {
            let c = |name: &str| e.get(name).unwrap_or(0);
            if r.runtime == Runtime::ThreadPool.name() {
                println!(
                    "    Engine: nowait full={} partial={} would-block={} ({:.1} ms in inline reads)  thread preads={}",
                    c("nowait_full"),
                    c("nowait_partial"),
                    c("nowait_would_block"),
                    c("nowait_nanos") as f64 / 1e6,
                    c("thread_preads")
                );
                if c("cached_queued") > 0 {
                    println!(
                        "    Cached-read queue: queued={} by the helper thread={} by the stream={} (helper slept {} times)",
                        c("cached_queued"),
                        c("helper_reads"),
                        c("helped_reads"),
                        c("helper_sleeps")
                    );
                }
            } else {
                let all: Vec<String> = e.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!("    Engine: {}", all.join(" "));
            }
        }
        if let Some((valid, ev, ring)) = r.pool {
            println!("    Pool: frames holding blocks={valid} evictions={ev} ring reuses={ring}");
        }
    }
}

fn run(o: Opts) -> io::Result<()> {
    let (path, nblocks) = o.data.scan_file("seqscan", o.block_size)?;
    if o.modes.contains(&Cache::Hot) {
        if let Some(f) = o.pool_frames {
            if (f as u64) < nblocks {
                eprintln!(
                    "seqscan: note: --pool-frames {f} applies to cold/warm; hot uses a pool of \
                     {nblocks} frames (the whole file)"
                );
            }
        }
    }
    let plain = match o.data.url() {
        Some(_) => None,
        None => Some(File::open(&path)?),
    };
    let path_s = path.display().to_string();
    let sh = Shared {
        path: path.clone(),
        path_s: path_s.clone(),
        nblocks,
        plain,
        o,
        memory: std::sync::OnceLock::new(),
    };
    let o = &sh.o;
    if !o.json {
        let names: Vec<&str> = o.runtimes.iter().map(|r| r.name()).collect();
        let how = if sh.plain.is_none() {
            "object (range GETs)".to_string()
        } else {
            format!(
                "{} nowait={} threads={}",
                if o.direct { "O_DIRECT" } else { "buffered" },
                if o.nowait && !o.direct { "on" } else { "off" },
                o.threads
            )
        };
        println!(
            "seqscan {}: {} blocks of {} ({}), runtimes={} max_ios={} io_combine_limit={} {how}",
            path_s,
            nblocks,
            o.block_size,
            format_size(nblocks * o.block_size as u64),
            names.join(","),
            o.max_ios,
            o.combine,
        );
        println!(
            "{:<12} {:<12} {:>3} {:>8} {:>9} {:>11} {:>7} {:>8} {:>8} {:>8} {:>8} {:>20}",
            "runtime",
            "run",
            "#",
            "seconds",
            "MiB/s",
            "pages/s",
            "reads",
            "blk/read",
            "hits",
            "inflight",
            "resident",
            "checksum"
        );
    }
    let mut runs: Vec<Run> = Vec::new();
    // The read-loop baseline runs beside the warm scans of the first runtime
    // that has warm scans.
    let read_loop_rt = o
        .runtimes
        .iter()
        .copied()
        .find(|&rt| o.modes.contains(&Cache::Warm) && Cache::Warm.runs_on(rt));
    let memory_loop_rt = o.modes.contains(&Cache::Hot).then(|| o.runtimes[0]);
    let options = Options::default()
        .threads(o.threads)
        .nowait(o.nowait)
        .cached_depth(o.cached_depth);
    for &rt in &o.runtimes {
        for &mode in &o.modes {
            if !mode.runs_on(rt) {
                let why = format!(
                    "seqscan: {rt} {} skipped: {rt} reads with O_DIRECT only (DMA files), and {} \
                     means the OS page cache, which O_DIRECT bypasses",
                    mode.name(),
                    mode.name()
                );
                if o.json {
                    eprintln!("{why}");
                } else {
                    println!("{why}");
                }
            }
        }
        let scans = Scans {
            shared: &sh,
            runtime: rt,
            read_loop: read_loop_rt == Some(rt),
            memory_loop: memory_loop_rt == Some(rt),
        };
        runs.extend(rt.run_with(&options, scans)??);
    }
    // Every run read the same blocks: the checksums must agree.
    if let Some(first) = runs.first() {
        if let Some(bad) = runs.iter().find(|r| r.checksum != first.checksum) {
            return Err(io::Error::other(format!(
                "checksum mismatch: {} run {} gave {}, {} run {} gave {}",
                first.label(),
                first.rep,
                first.checksum,
                bad.label(),
                bad.rep,
                bad.checksum
            )));
        }
    }
    // Summary (stderr under --json, so stdout stays one object per line).
    let mut out = String::new();
    {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "\nsummary over {} run(s) each: median MiB/s (min–max), median pages/s",
            o.repeat
        );
        let mut labels: Vec<String> = Vec::new();
        for r in &runs {
            if !labels.contains(&r.label()) {
                labels.push(r.label());
            }
        }
        let spread = |label: &str| {
            let v: Vec<f64> = runs
                .iter()
                .filter(|r| r.label() == label)
                .map(|r| mib_per_s(r.bytes, r.seconds))
                .collect();
            Spread::of(&v)
        };
        for l in &labels {
            let s = spread(l).expect("runs of this label");
            let pps: Vec<f64> = runs
                .iter()
                .filter(|r| &r.label() == l)
                .map(|r| r.pages as f64 / r.seconds)
                .collect();
            let p = Spread::of(&pps).expect("runs");
            let _ = writeln!(
                out,
                "  {:<18} {:>8.1} MiB/s ({:.1}–{:.1})  {:>11.0} pages/s",
                l, s.median, s.min, s.max, p.median
            );
        }
        for rt in &o.runtimes {
            let warm = format!("{rt} warm");
            let (Some(w), Some(b)) = (spread(&warm), spread("read-loop")) else {
                continue;
            };
            let ratios: Vec<f64> = (0..o.repeat)
                .filter_map(|rep| {
                    let find = |l: &str| runs.iter().find(|r| r.rep == rep && r.label() == l);
                    let (w, b) = (find(&warm)?, find("read-loop")?);
                    Some(b.seconds / w.seconds)
                })
                .collect();
            let rs = Spread::of(&ratios).expect("ratios");
            let _ = writeln!(
                out,
                "  {warm} / read-loop: {:.2}x (ratio of medians); per-run ratios median {:.2}x ({:.2}–{:.2})",
                w.median / b.median,
                rs.median,
                rs.min,
                rs.max
            );
        }
        // Hot: each stream's overhead per page over the memory loop, and
        // prefetch on against off.
        let secs_per_page = |label: &str| {
            let v: Vec<f64> = runs
                .iter()
                .filter(|r| r.label() == label)
                .map(|r| r.seconds / r.pages.max(1) as f64)
                .collect();
            Spread::of(&v)
        };
        if let Some(mem) = secs_per_page("memory") {
            for rt in &o.runtimes {
                for p in ["no-prefetch", "prefetch"] {
                    if let Some(s) = secs_per_page(&format!("{rt} hot {p}")) {
                        let _ = writeln!(
                            out,
                            "  {rt} hot {p}: {:.1} ns/page, memory loop {:.1} ns/page: overhead {:.1} ns/page",
                            s.median * 1e9,
                            mem.median * 1e9,
                            (s.median - mem.median) * 1e9
                        );
                    }
                }
            }
        }
        for rt in &o.runtimes {
            let (Some(on), Some(off)) = (
                secs_per_page(&format!("{rt} hot prefetch")),
                secs_per_page(&format!("{rt} hot no-prefetch")),
            ) else {
                continue;
            };
            let _ = writeln!(
                out,
                "  {rt} hot: prefetch on / off speed {:.3}x (ratio of medians)",
                off.median / on.median
            );
        }
        let _ = writeln!(out, "  checksum {} (all runs agree)", runs[0].checksum);
    }
    print_summary(o.json, &out);
    Ok(())
}

fn main() {
    args::clap_main("seqscan", USAGE, check, run);
}
