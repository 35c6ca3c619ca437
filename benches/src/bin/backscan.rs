//! `backscan`: forward against backward cold scans of a stamped data file
//! through a pagestream [`ReadStream`] on the thread-pool engine, with and
//! without backward I/O combining, buffered and O_DIRECT — the measurement
//! of PostgreSQL's "read stream: Backward I/O combining" thread.
//!
//! ```text
//! cargo run --release --bin backscan -- [--mode buffered|direct|both] [--pairs N] [--combine 1,8,16,32] [--json] …
//! ```
//!
//! For each mode (buffered, O_DIRECT), each combining setting (off: the
//! "before" table; on: the "after" table) and each `io_combine_limit`, it
//! runs `--pairs` forward/backward pairs, alternating (fwd, bwd, fwd, bwd …),
//! each cold: the file is fsynced and evicted from the OS page cache
//! (`POSIX_FADV_DONTNEED`), residency is checked with `mincore` and the run
//! refused if more than 1% is resident. It prints the seed's table,
//! `io_combine_limit | forward | backward | bwd/fwd`, with medians and
//! min–max, and the reads and mean blocks per read of each direction.
//!
//! Every run computes the order-independent checksum of the lib; every run
//! over the file must give the same one (forward and backward included),
//! otherwise the program fails.
//!
//! `--file` may name an object (`s3://bucket/key`, `http(s)://host/path`):
//! the scans then read it with range GETs on the object-store engine
//! ([`pagestream_bench::object`]), in one mode, `object` (buffered and
//! O_DIRECT are ways to read a local file), with nothing to make cold and
//! `--combine` defaulting to the engine's request size.

use clap::ArgAction;
use futures::executor::block_on;
use futures::StreamExt;
use pagestream::{
    source, BlockSource, BufferPool, EngineCounters, IoEngine, ReadStream, RingSize, StreamStats,
};
use pagestream_bench::args::{
    self, at_least_one, check_block_size, check_max_ios, format_size, number, parse_block_size,
    parse_on_off, parse_ring, parse_size, parse_yield_budget, List, UsageError,
};
use pagestream_bench::cache;
use pagestream_bench::checksum::Checksum;
use pagestream_bench::data;
use pagestream_bench::object::{self, combine_for, max_ios_for, not_for_url, ObjectReader};
use pagestream_bench::timing::{mib_per_s, print_summary, JsonObject, Spread};
use pagestream_threadpool::{OpenOptions, ThreadPoolEngine, ThreadPoolFile};
use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::time::Instant;

const USAGE: &str = "\
usage: backscan [options]

Scans a stamped data file cold, forward and backward, through a pagestream
ReadStream on the thread-pool engine, at several io_combine_limits, with and
without backward I/O combining, buffered and with O_DIRECT, and prints
io_combine_limit | forward | backward | bwd/fwd (medians, min-max) with the
reads and mean blocks per read of each direction. Forward and backward runs
alternate; every run is cold (fsync + POSIX_FADV_DONTNEED, residency checked
with mincore, refused if more than 1% stays resident).

options:
  --file PATH|URL     data file (default target/pagestream-data/
                      seqscan-<size>.dat, the file seqscan uses for that
                      size, created, stamped, if absent), or an object:
                      s3://bucket/key (endpoint and credentials from
                      AWS_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
                      AWS_REGION, AWS_ALLOW_HTTP) or http(s)://host/path,
                      read with range GETs by the object-store engine: one
                      mode, object, nothing made cold (--mode, --direct and
                      --create are errors; --threads, --nowait unused)
  --create            with --file: create PATH (stamped, --size bytes) if it
                      does not exist; without it a missing PATH is an error
  --size SIZE         size of a file to create (default 256MiB, not seqscan's
                      1GiB: the full matrix is 4 limits x 2 directions x
                      2 combining settings x 2 modes x 7 pairs = 224 cold
                      scans; a 1GiB file is a separate file, left alone)
  --mode MODE         buffered | direct | both (default both)
  --direct            same as --mode direct
  --combining SET     backward combining: on | off | both (default both;
                      off is the \"before\" table)
  --combine LIST      io_combine_limits, comma-separated (default 1,8,16,32;
                      for a URL 4MiB of blocks, the engine's request size)
  --pairs N           forward/backward pairs per row (default 7)
  --retries N         run a pair again, up to N times (default 3), when
                      another process read or wrote more than 4 MiB on the
                      machine's disks (/proc/diskstats), or used more than a
                      tenth of the CPUs or the hypervisor stole that much
                      (/proc/stat) during it
  --max-ios N         reads in flight at most (default 16; 64 for a URL)
  --pool-frames N     buffer pool frames (default 16384)
  --block-size SIZE   block size (default 8KiB)
  --ring SIZE|auto|off  ring (default auto: PostgreSQL 18's BULKREAD ring when
                      the file is larger than a quarter of the pool, as seqscan)
  --backward-readahead SIZE  a descending scan's own read-ahead window, advised
                      below its reads on buffered files (default 2MiB, the
                      library's; 0 turns it off)
  --threads N         I/O threads (default 16)
  --nowait on|off     inline RWF_NOWAIT attempt for buffered reads (default on)
  --prefetch on|off   page prefetch when a page is handed out (default on, the
                      library's)
  --yield-budget B    the streams' yield budget: auto (default), off, a time
                      (200us, 1ms) or a count of items
  --json              one JSON object per row (limit x direction x combining
                      x mode) on stdout instead of the tables
  --verbose           print every run's stream statistics (stderr)
  --help              this text";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Forward,
    Backward,
}

impl Dir {
    fn name(self) -> &'static str {
        match self {
            Dir::Forward => "forward",
            Dir::Backward => "backward",
        }
    }
}

/// `--ring`: `None` is auto, `Some(0)` off.
type RingSetting = Option<usize>;

/// One `--mode`: O_DIRECT off/on in the order run, and how it was given.
#[derive(Debug, Clone, PartialEq)]
struct ModeArg(Vec<bool>, &'static str);

fn parse_mode(s: &str) -> Result<ModeArg, String> {
    match s {
        "buffered" => Ok(ModeArg(vec![false], "--mode buffered")),
        "direct" => Ok(ModeArg(vec![true], "--mode direct")),
        "both" => Ok(ModeArg(vec![false, true], "--mode both")),
        _ => Err(format!("{s:?}: expected buffered, direct or both")),
    }
}

#[derive(Debug, clap::Parser)]
struct Opts {
    #[arg(long)]
    file: Option<PathBuf>,
    #[arg(long)]
    create: bool,
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    size: u64,
    /// Every `--mode` given (they must agree).
    #[arg(long = "mode", value_parser = parse_mode)]
    mode: Vec<ModeArg>,
    #[arg(long)]
    direct: bool,
    /// O_DIRECT off/on, in the order run (set by `check`).
    #[arg(skip)]
    modes: Vec<bool>,
    /// Backward combining settings, in the order run.
    #[arg(long, default_value = "both", value_parser = |s: &str| match s {
        "on" => Ok(vec![true]),
        "off" => Ok(vec![false]),
        "both" => Ok(vec![false, true]),
        _ => Err(format!("{s:?}: expected on, off or both")),
    })]
    combining: List<bool>,
    /// `--combine` as given (`None`: the default for the file).
    #[arg(long = "combine", value_parser = parse_list)]
    combine_given: Option<List<usize>>,
    /// The io_combine_limits to run (set by `check`).
    #[arg(skip)]
    combine: List<usize>,
    #[arg(long, default_value = "7", value_parser = number::<usize>)]
    pairs: usize,
    /// `--max-ios` as given (`None`: the default for the file).
    #[arg(long = "max-ios", value_parser = number::<usize>)]
    max_ios_given: Option<usize>,
    /// Reads in flight (set by `check`).
    #[arg(skip)]
    max_ios: usize,
    #[arg(long, default_value = "16384", value_parser = number::<usize>)]
    pool_frames: usize,
    #[arg(long, default_value = "8KiB", value_parser = parse_block_size)]
    block_size: usize,
    #[arg(long, default_value = "auto", value_parser = parse_ring)]
    ring: RingSetting,
    #[arg(long, default_value_t = pagestream::DEFAULT_BACKWARD_READAHEAD, value_parser = parse_size)]
    backward_readahead: u64,
    #[arg(long, default_value_t = pagestream_threadpool::DEFAULT_THREADS, value_parser = number::<usize>)]
    threads: usize,
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    nowait: bool,
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    prefetch: bool,
    #[arg(long = "yield-budget", default_value = "auto", value_parser = parse_yield_budget)]
    yield_budget: pagestream::YieldBudget,
    #[arg(long, default_value = "3", value_parser = number::<usize>)]
    retries: usize,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    verbose: bool,
}

fn parse_list(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',') {
        let p = part.trim();
        let n: usize = p
            .parse()
            .map_err(|_| format!("{p:?} is not a number (expected e.g. 1,8,16,32)"))?;
        if n == 0 || n > pagestream::MAX_IO_COMBINE_LIMIT {
            return Err(format!(
                "{n} is out of range: io_combine_limit must be 1 to {}",
                pagestream::MAX_IO_COMBINE_LIMIT
            ));
        }
        if !v.contains(&n) {
            v.push(n);
        }
    }
    Ok(v)
}

/// The checks across flags; sets `modes`, `combine` and `max_ios`.
fn check(mut o: Opts) -> Result<Opts, UsageError> {
    let url = o
        .file
        .as_deref()
        .and_then(object::url_of)
        .map(str::to_owned);
    if let Some(url) = &url {
        if o.create {
            return Err(not_for_url("--create", url, object::NO_CREATE));
        }
        if o.direct {
            return Err(not_for_url("--direct", url, object::NO_DIRECT));
        }
        if let Some(m) = o.mode.first() {
            return Err(not_for_url(
                m.1,
                url,
                "buffered and O_DIRECT are ways to read a local file; an object is read with \
                 range GETs (leave --mode out)",
            ));
        }
    }
    o.combine = match o.combine_given.take() {
        Some(c) => c,
        None if url.is_some() => vec![combine_for(url.is_some(), None, o.block_size)],
        None => vec![1, 8, 16, 32],
    };
    o.max_ios = max_ios_for(url.is_some(), o.max_ios_given);
    let mut given: Vec<ModeArg> = o.mode.clone();
    if o.direct {
        given.push(ModeArg(vec![true], "--direct"));
    }
    if let Some(first) = given.first() {
        if let Some(other) = given.iter().find(|m| m.0 != first.0) {
            return Err(UsageError(format!("{} contradicts {}", other.1, first.1)));
        }
    }
    o.modes = match &url {
        // One mode, reported as not O_DIRECT.
        Some(_) => vec![false],
        None => given.first().map_or(vec![false, true], |m| m.0.clone()),
    };
    at_least_one("pairs", o.pairs)?;
    at_least_one("threads", o.threads)?;
    check_max_ios(o.max_ios)?;
    at_least_one("pool-frames", o.pool_frames)?;
    check_block_size(o.block_size, o.size)?;
    Ok(o)
}

/// One timed cold scan.
struct Run {
    seconds: f64,
    pages: u64,
    checksum: u64,
    resident_before: f64,
    stats: StreamStats,
    /// The engine's counters during the run.
    engine: EngineCounters,
    /// Bytes read from and written to the machine's disks during the run
    /// (`/proc/diskstats`; `None` where it cannot be read): reads beyond the
    /// file's size, or writes, are another process's I/O competing with it.
    disk: Option<(u64, u64)>,
    /// CPU time during the run, in clock ticks: other processes' (all CPUs'
    /// busy time less this process's) and stolen by the hypervisor
    /// (`/proc/stat`, `/proc/self/stat`; `None` where they cannot be read).
    cpu: Option<CpuTicks>,
}

/// The runs of one direction of one row.
struct Side {
    runs: Vec<Run>,
}

impl Side {
    fn seconds(&self) -> Spread {
        let v: Vec<f64> = self.runs.iter().map(|r| r.seconds).collect();
        Spread::of(&v).expect("at least one run")
    }

    fn median_of(&self, f: impl Fn(&Run) -> f64) -> f64 {
        let v: Vec<f64> = self.runs.iter().map(f).collect();
        Spread::of(&v).expect("at least one run").median
    }

    /// Largest disk traffic of one run, in MiB (NaN, `null` in JSON, when
    /// not known).
    fn disk_max(&self, f: impl Fn((u64, u64)) -> u64) -> f64 {
        self.runs
            .iter()
            .map(|r| r.disk.map_or(f64::NAN, |d| f(d) as f64 / MIB))
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// Largest CPU figure of one run (NaN when not known).
    fn cpu_max(&self, f: impl Fn(&CpuTicks) -> f64) -> f64 {
        self.runs
            .iter()
            .map(|r| r.cpu.as_ref().map_or(f64::NAN, &f))
            .fold(f64::NEG_INFINITY, f64::max)
    }

    fn reads(&self) -> f64 {
        self.median_of(|r| r.stats.reads as f64)
    }

    fn blocks_per_read(&self) -> f64 {
        self.median_of(|r| r.stats.mean_blocks_per_read())
    }
}

/// One row: a limit, a combining setting and a mode, both directions.
struct Row {
    direct: bool,
    backward_combining: bool,
    combine: usize,
    fwd: Side,
    bwd: Side,
    /// Pairs discarded and run again because another process used the disk.
    redone: usize,
}

impl Row {
    /// Median of the per-pair bwd/fwd ratios.
    fn pair_ratios(&self) -> Spread {
        let v: Vec<f64> = self
            .fwd
            .runs
            .iter()
            .zip(&self.bwd.runs)
            .map(|(f, b)| b.seconds / f.seconds)
            .collect();
        Spread::of(&v).expect("at least one pair")
    }

    fn ratio(&self) -> f64 {
        self.bwd.seconds().median / self.fwd.seconds().median
    }

    fn json(&self, dir: Dir, o: &Opts, path: &str, bytes: u64, object: bool) -> JsonObject {
        let side = match dir {
            Dir::Forward => &self.fwd,
            Dir::Backward => &self.bwd,
        };
        let s = side.seconds();
        let first = &side.runs[0];
        let med = |f: &dyn Fn(&Run) -> f64| side.median_of(f);
        let counter = |name: &'static str| med(&|r| r.engine.get(name).unwrap_or(0) as f64);
        let mut j = JsonObject::default();
        j.set("engine", if object { "object-store" } else { "threadpool" })
            .set("combine", self.combine)
            .set("direction", dir.name())
            .set("backward_combining", self.backward_combining)
            .set("direct", self.direct)
            .set("seconds", s.median)
            .set("seconds_min", s.min)
            .set("seconds_max", s.max)
            .set("reads", side.reads())
            .set("mean_blocks_per_read", side.blocks_per_read())
            .set("checksum", first.checksum)
            .set("pairs", s.n)
            .set("pairs_redone", self.redone)
            .set("mib_per_s", mib_per_s(bytes, s.median))
            .set("bwd_fwd", self.ratio())
            .set("bwd_fwd_pairs_median", self.pair_ratios().median)
            .set("pages", first.pages)
            .set("max_in_flight", med(&|r| r.stats.max_in_flight as f64))
            .set(
                "max_blocks_per_read",
                med(&|r| r.stats.max_blocks_per_read as f64),
            )
            .set("backward_reads", med(&|r| r.stats.backward_reads as f64))
            .set("cached_reads", med(&|r| r.stats.cached_reads as f64))
            .set("advice", med(&|r| r.stats.advice as f64))
            .set("waits", med(&|r| r.stats.waits as f64))
            .set("wait_seconds", med(&|r| r.stats.wait_time.as_secs_f64()))
            .set("mean_distance", med(&|r| r.stats.mean_distance()))
            .set("mean_pinned", med(&|r| r.stats.mean_pinned()))
            .set("max_distance", med(&|r| r.stats.max_distance as f64))
            .set(
                "limited_by_max_ios",
                med(&|r| r.stats.limited_by_max_ios as f64),
            )
            .set(
                "limited_by_pin_budget",
                med(&|r| r.stats.limited_by_pin_budget as f64),
            )
            .set(
                "limited_by_distance",
                med(&|r| r.stats.limited_by_distance as f64),
            )
            .set(
                "limited_by_frames",
                med(&|r| r.stats.limited_by_frames as f64),
            )
            .set("nowait", o.nowait && !self.direct && !object)
            .set("prefetch", o.prefetch)
            .set("yield_budget", args::format_budget(o.yield_budget))
            .set(
                "resident_before_max",
                side.runs
                    .iter()
                    .map(|r| r.resident_before)
                    .fold(0.0, f64::max),
            )
            .set(
                "other_cpu_seconds_max",
                side.cpu_max(|c| c.others() as f64 / clock_ticks_per_s() as f64),
            )
            .set(
                "steal_seconds_max",
                side.cpu_max(|c| c.steal as f64 / clock_ticks_per_s() as f64),
            )
            .set("disk_read_mib_max", side.disk_max(|d| d.0))
            .set("disk_write_mib_max", side.disk_max(|d| d.1))
            .set("file", path)
            .set("block_size", o.block_size)
            .set("max_ios", o.max_ios)
            .set("pool_frames", o.pool_frames);
        if object {
            j.set("engine_gets", counter("gets"))
                .set("engine_bytes", counter("bytes"))
                .set("engine_hedged", counter("hedged"));
        } else {
            j.set("engine_thread_preads", counter("thread_preads"))
                .set("engine_nowait_full", counter("nowait_full"))
                .set("engine_nowait_seconds", counter("nowait_nanos") / 1e9);
        }
        j
    }
}

const MIB: f64 = (1u64 << 20) as f64;

/// Disk traffic of a run, beyond its own reads, above which the run counts
/// as disturbed by another process.
const DISTURBED: u64 = 4 << 20;

/// Disk bytes a run saw besides its own `own` bytes read: other reads and
/// all writes.
fn other_io(disk: (u64, u64), own: u64) -> u64 {
    disk.0.saturating_sub(own) + disk.1
}

impl Run {
    /// Whether another process used the disks (more than 4 MiB besides this
    /// run's reads) or the CPUs, or the hypervisor stole them (either more
    /// than a tenth of this run's time over all CPUs, and at least 8 ticks:
    /// a quiet machine shows 0–5 ticks of kernel work not charged to this
    /// process) during the run.
    fn disturbed(&self, own_bytes: u64) -> bool {
        let disk = self
            .disk
            .is_some_and(|d| other_io(d, own_bytes) > DISTURBED);
        let cpu = self.cpu.is_some_and(|c| {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
            let ticks = self.seconds * clock_ticks_per_s() as f64 * cpus;
            let much = |t: u64| t >= 8 && t as f64 > 0.1 * ticks;
            much(c.others()) || much(c.steal)
        });
        disk || cpu
    }
}

/// CPU clock ticks, see [`Run::cpu`].
#[derive(Debug, Clone, Copy)]
struct CpuTicks {
    /// Busy ticks of all CPUs (not idle, not I/O wait, not steal).
    busy: u64,
    /// This process's user + system ticks (all threads).
    own: u64,
    /// Ticks stolen by the hypervisor.
    steal: u64,
}

impl CpuTicks {
    fn others(&self) -> u64 {
        self.busy.saturating_sub(self.own)
    }
}

fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf takes no pointers.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).unwrap_or(100).max(1)
}

/// CPU ticks so far, from `/proc/stat` and `/proc/self/stat`.
fn cpu_ticks() -> Option<CpuTicks> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let busy = f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)?;
    let steal = *f.get(7)?;
    let me = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name in parentheses: utime and stime are the
    // 14th and 15th fields overall, the 12th and 13th after ") ".
    let rest = &me[me.rfind(')')? + 1..];
    let g: Vec<&str> = rest.split_whitespace().collect();
    let own = g.get(11)?.parse::<u64>().ok()? + g.get(12)?.parse::<u64>().ok()?;
    Some(CpuTicks { busy, own, steal })
}

/// Bytes read and written so far by the machine's disks, from
/// `/proc/diskstats` (whole disks only: partitions, device-mapper, md, loop
/// and RAM disks would count the same I/O twice or are not disks).
fn disk_bytes() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/diskstats").ok()?;
    let (mut read, mut written) = (0u64, 0u64);
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 {
            continue;
        }
        let name = f[2];
        if ["loop", "ram", "zram", "dm-", "md", "sr"]
            .iter()
            .any(|p| name.starts_with(p))
            || !std::path::Path::new("/sys/block").join(name).exists()
        {
            continue;
        }
        // Fields 6 and 10: sectors (of 512 bytes) read and written.
        read += f[5].parse::<u64>().ok()? * 512;
        written += f[9].parse::<u64>().ok()? * 512;
    }
    Some((read, written))
}

/// What reads the file.
enum Reader {
    /// A local file: the thread-pool engine, and a buffered handle for
    /// cache control.
    Local {
        engine: ThreadPoolEngine,
        plain: File,
    },
    /// An object URL: the object-store engine.
    Object(ObjectReader),
}

struct Ctx {
    o: Opts,
    path: PathBuf,
    nblocks: u64,
    reader: Reader,
}

impl Ctx {
    fn is_object(&self) -> bool {
        matches!(self.reader, Reader::Object(_))
    }

    fn engine_counters(&self) -> EngineCounters {
        match &self.reader {
            Reader::Local { engine, .. } => engine.stats().counters(),
            Reader::Object(r) => r.engine().counters(),
        }
    }

    fn scan<S: BlockSource>(
        &self,
        direct: bool,
        combine: usize,
        backward_combining: bool,
        src: S,
    ) -> io::Result<(Checksum, f64, StreamStats)> {
        match &self.reader {
            Reader::Local { engine, .. } => {
                let file = ThreadPoolFile::open_with(
                    &self.path,
                    OpenOptions::new()
                        .direct(direct)
                        .block_size(self.o.block_size),
                )?;
                self.drive(engine.clone(), file, combine, backward_combining, src)
            }
            Reader::Object(r) => {
                let file = r.open(&self.path.display().to_string())?;
                self.drive(r.engine(), file, combine, backward_combining, src)
            }
        }
    }

    fn drive<E: IoEngine, S: BlockSource>(
        &self,
        engine: E,
        file: E::File,
        combine: usize,
        backward_combining: bool,
        src: S,
    ) -> io::Result<(Checksum, f64, StreamStats)> {
        let frames = self.o.pool_frames;
        let pool = BufferPool::new(frames, self.o.block_size).map_err(io::Error::from)?;
        let ring = match self.o.ring {
            None if self.nblocks > frames as u64 / 4 => Some(RingSize::BULKREAD),
            None | Some(0) => None,
            Some(b) => Some(RingSize::Bytes(b)),
        };
        let mut stream = ReadStream::builder(&pool, engine, file)
            .max_ios(self.o.max_ios)
            .io_combine_limit(combine)
            .backward_combining(backward_combining)
            .backward_readahead(self.o.backward_readahead)
            .prefetch(self.o.prefetch)
            .yield_budget(self.o.yield_budget)
            .ring(ring)
            .build(src)
            .map_err(io::Error::from)?;
        block_on(async {
            let start = Instant::now();
            let mut ck = Checksum::default();
            while let Some(page) = stream.next().await {
                let page = page?;
                ck.add(page.block(), &page);
            }
            let secs = start.elapsed().as_secs_f64();
            Ok((ck, secs, stream.close().await))
        })
    }

    /// One cold scan in direction `dir`.
    fn cold(
        &self,
        direct: bool,
        combine: usize,
        backward_combining: bool,
        dir: Dir,
    ) -> io::Result<Run> {
        let resident = match &self.reader {
            Reader::Local { plain, .. } => cache::make_cold(plain, &self.path)?,
            // An object has no page cache to evict it from.
            Reader::Object(_) => 0.0,
        };
        let before = self.engine_counters();
        let disk_before = disk_bytes();
        let cpu_before = cpu_ticks();
        let (ck, secs, st) = match dir {
            Dir::Forward => self.scan(
                direct,
                combine,
                backward_combining,
                source::forward(0..self.nblocks),
            )?,
            Dir::Backward => self.scan(
                direct,
                combine,
                backward_combining,
                source::backward(0..self.nblocks),
            )?,
        };
        let engine = self.engine_counters().since(&before);
        let cpu = match (cpu_before, cpu_ticks()) {
            (Some(a), Some(b)) => Some(CpuTicks {
                busy: b.busy.saturating_sub(a.busy),
                own: b.own.saturating_sub(a.own),
                steal: b.steal.saturating_sub(a.steal),
            }),
            _ => None,
        };
        let disk = match (disk_before, disk_bytes()) {
            (Some((r0, w0)), Some((r1, w1))) => {
                Some((r1.saturating_sub(r0), w1.saturating_sub(w0)))
            }
            _ => None,
        };
        if ck.pages != self.nblocks {
            return Err(io::Error::other(format!(
                "{} scan returned {} pages of {}",
                dir.name(),
                ck.pages,
                self.nblocks
            )));
        }
        if self.o.verbose {
            eprintln!(
                "backscan: {} combine={} backward_combining={} {}: {:.1} ms",
                mode_name(direct, self.is_object()),
                combine,
                if backward_combining { "on" } else { "off" },
                dir.name(),
                secs * 1e3
            );
            for line in st.to_string().lines() {
                eprintln!("    {line}");
            }
            let c = |name: &str| engine.get(name).unwrap_or(0);
            if self.is_object() {
                eprintln!("    Engine: {engine}");
            } else {
                eprintln!(
                    "    Engine: nowait full={} partial={} would-block={} ({:.1} ms in inline reads)  thread preads={}",
                    c("nowait_full"),
                    c("nowait_partial"),
                    c("nowait_would_block"),
                    c("nowait_nanos") as f64 / 1e6,
                    c("thread_preads")
                );
            }
            if let Some(c) = cpu {
                eprintln!(
                    "    CPU: others {} ticks, this process {} ticks, stolen {} ticks ({} Hz)",
                    c.others(),
                    c.own,
                    c.steal,
                    clock_ticks_per_s()
                );
            }
            if let Some((r, w)) = disk {
                eprintln!(
                    "    Disks: {:.1} MiB read, {:.1} MiB written during the run",
                    r as f64 / MIB,
                    w as f64 / MIB
                );
            }
        }
        Ok(Run {
            seconds: secs,
            pages: ck.pages,
            checksum: ck.sum,
            resident_before: resident,
            stats: st,
            engine,
            disk,
            cpu,
        })
    }

    fn row(&self, direct: bool, backward_combining: bool, combine: usize) -> io::Result<Row> {
        let mut fwd = Vec::with_capacity(self.o.pairs);
        let mut bwd = Vec::with_capacity(self.o.pairs);
        let mut redone = 0;
        let bytes = self.nblocks * self.o.block_size as u64;
        for _ in 0..self.o.pairs {
            let mut attempt = 0;
            let (f, b) = loop {
                let f = self.cold(direct, combine, backward_combining, Dir::Forward)?;
                let b = self.cold(direct, combine, backward_combining, Dir::Backward)?;
                let disturbed = [&f, &b].iter().any(|r| r.disturbed(bytes));
                if !disturbed || attempt == self.o.retries {
                    break (f, b);
                }
                attempt += 1;
                redone += 1;
                if self.o.verbose {
                    eprintln!(
                        "backscan: another process used the disk or the CPUs (or the \
                         hypervisor stole them); pair run again"
                    );
                }
                // Give the other I/O a moment to end.
                std::thread::sleep(std::time::Duration::from_secs(2));
            };
            fwd.push(f);
            bwd.push(b);
        }
        Ok(Row {
            direct,
            backward_combining,
            combine,
            fwd: Side { runs: fwd },
            bwd: Side { runs: bwd },
            redone,
        })
    }
}

fn ms(s: &Spread) -> String {
    format!(
        "{:.1} ({:.1}–{:.1})",
        s.median * 1e3,
        s.min * 1e3,
        s.max * 1e3
    )
}

/// How the file is read, as the tables and messages say it.
fn mode_name(direct: bool, object: bool) -> &'static str {
    match (object, direct) {
        (true, _) => "object (range GETs)",
        (false, true) => "O_DIRECT",
        (false, false) => "buffered",
    }
}

fn table_header(
    out: &mut String,
    direct: bool,
    object: bool,
    combining: bool,
    o: &Opts,
    bytes: u64,
) {
    let _ = writeln!(
        out,
        "\n=== {}{}, backward combining {} — {} pairs, median ms (min–max) ===",
        if object { "" } else { "cold, " },
        mode_name(direct, object),
        if combining {
            "on (after)"
        } else {
            "off (before)"
        },
        o.pairs
    );
    let _ = writeln!(
        out,
        "(file {}, max_ios={}, {} frames)",
        format_size(bytes),
        o.max_ios,
        o.pool_frames
    );
    let _ = writeln!(
        out,
        "{:<16} | {:>24} | {:>24} | {:>7} | {:>9} | {:>8} | {:>9} | {:>8}",
        "io_combine_limit",
        "forward(ms)",
        "backward(ms)",
        "bwd/fwd",
        "fwd reads",
        "fwd blk/r",
        "bwd reads",
        "bwd blk/r"
    );
    let _ = writeln!(
        out,
        "{:-<17}+{:-<26}+{:-<26}+{:-<9}+{:-<11}+{:-<10}+{:-<11}+{:-<9}",
        "", "", "", "", "", "", "", ""
    );
}

fn table_row(out: &mut String, r: &Row) {
    let _ = writeln!(
        out,
        "{:<16} | {:>24} | {:>24} | {:>6.2}x | {:>9.0} | {:>8.2} | {:>9.0} | {:>8.2}",
        r.combine,
        ms(&r.fwd.seconds()),
        ms(&r.bwd.seconds()),
        r.ratio(),
        r.fwd.reads(),
        r.fwd.blocks_per_read(),
        r.bwd.reads(),
        r.bwd.blocks_per_read()
    );
}

/// A line saying how much other disk I/O the table's runs saw: reads beyond
/// the file's own bytes and writes (another process's I/O on the same disk,
/// which a CPU-quiet check cannot see).
fn disk_note(out: &mut String, rows: &[Row], bytes: u64) {
    let runs = || {
        rows.iter()
            .flat_map(|r| r.fwd.runs.iter().chain(&r.bwd.runs))
    };
    let total = runs().count();
    let known: Vec<(u64, u64)> = runs().filter_map(|r| r.disk).collect();
    if known.is_empty() {
        return;
    }
    let disturbed = runs().filter(|r| r.disturbed(bytes)).count();
    let max_cpu = runs()
        .filter_map(|r| r.cpu.map(|c| c.others()))
        .max()
        .unwrap_or(0);
    let max_steal = runs()
        .filter_map(|r| r.cpu.map(|c| c.steal))
        .max()
        .unwrap_or(0);
    let redone: usize = rows.iter().map(|r| r.redone).sum();
    let max_read = known.iter().map(|d| d.0.saturating_sub(bytes)).max();
    let max_written = known.iter().map(|d| d.1).max();
    let _ = writeln!(
        out,
        "other processes: {redone} pair(s) run again because another process used the disk or \
         the CPUs or the hypervisor stole them; {disturbed} of {total} runs kept were disturbed; at most, in one run: \
         {:.1} MiB read beyond the file, {:.1} MiB written, {:.2} s of CPU, {:.2} s stolen",
        max_read.unwrap_or(0) as f64 / MIB,
        max_written.unwrap_or(0) as f64 / MIB,
        max_cpu as f64 / clock_ticks_per_s() as f64,
        max_steal as f64 / clock_ticks_per_s() as f64
    );
}

fn run(o: Opts) -> io::Result<()> {
    let (path, nblocks) = data::scan_file(
        "backscan",
        o.file.as_deref(),
        o.create,
        o.size,
        o.block_size,
    )?;
    let bytes = nblocks * o.block_size as u64;
    let reader = match o.file.as_deref().and_then(object::url_of) {
        Some(_) => Reader::Object(ObjectReader::start()?),
        None => Reader::Local {
            engine: ThreadPoolEngine::builder()
                .threads(o.threads)
                .nowait(o.nowait)
                .build(),
            plain: File::open(&path)?,
        },
    };
    let ctx = Ctx {
        path: path.clone(),
        nblocks,
        reader,
        o,
    };
    let o = &ctx.o;
    let object = ctx.is_object();
    let path_s = path.display().to_string();
    if !o.json {
        let engine = if object {
            "engine=object-store".to_string()
        } else {
            format!(
                "threads={} nowait={}",
                o.threads,
                if o.nowait { "on (buffered)" } else { "off" }
            )
        };
        println!(
            "backscan {}: {} blocks of {} ({}), max_ios={} {engine} pairs={} \
             (forward and backward alternate{})",
            path_s,
            nblocks,
            o.block_size,
            format_size(bytes),
            o.max_ios,
            o.pairs,
            if object { "" } else { ", every run cold" }
        );
    }
    let mut checksum: Option<u64> = None;
    for &direct in &o.modes {
        for &combining in &o.combining {
            let mut out = String::new();
            if !o.json {
                table_header(&mut out, direct, object, combining, o, bytes);
                print!("{out}");
                out.clear();
            }
            let mut rows = Vec::new();
            for &combine in &o.combine {
                let row = ctx.row(direct, combining, combine)?;
                // Every run over the file must agree: forward with backward,
                // and every row with every other.
                for (dir, side) in [(Dir::Forward, &row.fwd), (Dir::Backward, &row.bwd)] {
                    for r in &side.runs {
                        match checksum {
                            None => checksum = Some(r.checksum),
                            Some(c) if c != r.checksum => {
                                return Err(io::Error::other(format!(
                                    "checksum mismatch: a {} scan ({}, io_combine_limit {}, \
                                     backward combining {}) gave {}, earlier scans gave {c}",
                                    dir.name(),
                                    mode_name(direct, object),
                                    combine,
                                    if combining { "on" } else { "off" },
                                    r.checksum
                                )))
                            }
                            Some(_) => {}
                        }
                    }
                }
                if o.json {
                    for dir in [Dir::Forward, Dir::Backward] {
                        println!("{}", row.json(dir, o, &path_s, bytes, object).to_line());
                    }
                } else {
                    table_row(&mut out, &row);
                    print!("{out}");
                    out.clear();
                }
                rows.push(row);
            }
            if !o.json {
                disk_note(&mut out, &rows, bytes);
                print!("{out}");
            }
        }
    }
    let summary = format!(
        "\nchecksum {} (every forward and backward run agrees)\n",
        checksum.unwrap_or(0)
    );
    print_summary(o.json, &summary);
    Ok(())
}

fn main() {
    args::clap_main("backscan", USAGE, check, run);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Option<Opts>, UsageError> {
        args::parse_checked(USAGE, v.iter().map(|s| s.to_string()), check)
    }

    #[test]
    fn defaults() {
        let o = parse(&[]).unwrap().unwrap();
        assert_eq!(o.size, 256 << 20);
        assert_eq!(o.combine, [1, 8, 16, 32]);
        assert_eq!(o.pairs, 7);
        assert_eq!(o.max_ios, 16);
        assert_eq!(o.modes, [false, true]);
        assert_eq!(o.combining, [false, true]);
        assert!(!o.json);
        assert_eq!(o.backward_readahead, pagestream::DEFAULT_BACKWARD_READAHEAD);
        assert!(parse(&["--help"]).unwrap().is_none());
        let o = parse(&["--backward-readahead", "8MiB"]).unwrap().unwrap();
        assert_eq!(o.backward_readahead, 8 << 20);
        let o = parse(&["--backward-readahead=0"]).unwrap().unwrap();
        assert_eq!(o.backward_readahead, 0);
        assert!(parse(&["--backward-readahead", "lots"]).is_err());
    }

    #[test]
    fn lists_and_modes() {
        assert_eq!(parse_list("32, 8,8,1"), Ok(vec![32, 8, 1]));
        assert!(parse_list("0").is_err());
        assert!(parse_list("4097").is_err());
        assert!(parse_list("8,").is_err());
        let o = parse(&["--direct", "--combining", "on", "--combine=16"])
            .unwrap()
            .unwrap();
        assert_eq!(
            (o.modes, o.combining, o.combine),
            (vec![true], vec![true], vec![16])
        );
        let o = parse(&["--mode", "direct", "--direct"]).unwrap().unwrap();
        assert_eq!(o.modes, [true]);
        assert!(parse(&["--mode", "both", "--direct"]).is_err());
    }
}
