//! `bitmapscan`: a bitmap heap scan over a data file, cold, across
//! `max_ios` settings, with kernel read-ahead on, off and under O_DIRECT —
//! the experiment of seed 001 (PostgreSQL's BitmapHeapScan on a read
//! stream, `effective_io_concurrency` 0…16).
//!
//! ```text
//! cargo run --release --bin bitmapscan -- [--density D] [--pattern uniform|clustered]
//!     [--max-ios 0,1,2,4,8,16] [--modes readahead,random,direct] [--gap-limit N] [--repeat N]
//!     [--json] …
//! ```
//!
//! **The table.** Each page of `block_size` bytes holds `block_size / 256`
//! fixed-size tuples of 256 bytes (32 on an 8 KiB page). Whether tuple `t`
//! of block `b` matches the query is a seeded hash of `(b, t)` — as if an
//! index had answered a range condition on a column of random values — so
//! the bitmap is built without reading the file, and any file can be
//! scanned:
//!
//! - `uniform`: each tuple matches with probability `density`
//!   (a page holds a match with probability `1 − (1 − density)^32`);
//! - `clustered`: runs of `--cluster` consecutive pages match entirely,
//!   placed at random until `density` of all tuples match (a range
//!   condition on a column correlated with the physical order).
//!
//! **The bitmap** lists, in block order, every block with a match and either
//! its matching tuple offsets (exact) or, past `--exact-pages` exact pages,
//! a *lossy* flag for the pages with the most matches (PostgreSQL's TIDBitmap
//! lossifies under `work_mem` the same way, keeping the sparse pages exact).
//!
//! **The scan** is one [`ReadStream`] over the bitmap's blocks, each carrying
//! its [`Tuples`] as per-block data ([`source::with_data`]). The consumer
//! visits only the matching tuples of an exact page, and every tuple of a
//! lossy page, rechecking the condition. Each visited match adds a hash of
//! its block, offset and first 16 bytes to an order-independent checksum;
//! every run must agree on it and on the count.
//!
//! **Modes**: `readahead` (buffered, the kernel's read-ahead on);
//! `random` (buffered, `POSIX_FADV_RANDOM`: kernel read-ahead off, so the
//! stream's own `POSIX_FADV_WILLNEED` advice and reads in flight are all the
//! look-ahead there is); `direct` (O_DIRECT: no page cache, reads go to the
//! device as issued). Every run is cold (the file is evicted first and
//! checked with `mincore`) on a fresh pool, on the thread-pool engine.
//! `max_ios 0` is PostgreSQL's `effective_io_concurrency = 0`: one read at a
//! time and no advice. Runs interleave: each repeat goes through every
//! `max_ios` and mode once.
//!
//! `--file` may name an object (`s3://bucket/key`, `http(s)://host/path`):
//! the bitmap's blocks are then read with range GETs by the object-store
//! engine ([`pagestream_bench::object`]), in one mode, `object` (the modes
//! above are ways to read a local file), with nothing to make cold.

use futures::executor::block_on;
use futures::StreamExt;
use pagestream::{source, BufferPool, IoEngine, ReadStream, StreamStats};
use pagestream_bench::args::{
    self, at_least_one, check_block_size, check_combine, check_max_ios, format_size, number,
    parse_block_size, List, UsageError,
};
use pagestream_bench::cache;
use pagestream_bench::data::FileArgs;
use pagestream_bench::object::{combine_for, not_for_url, ObjectReader};
use pagestream_bench::timing::{mib_per_s, print_summary, JsonObject, Spread};
use pagestream_threadpool::{FileAdvice, OpenOptions, ThreadPoolEngine, ThreadPoolFile};
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::time::Instant;

const USAGE: &str = "\
usage: bitmapscan [options]

A bitmap heap scan (seed 001) over a data file: only blocks holding tuples
that match are read, each carrying its matching tuple offsets (or a lossy
flag); cold runs across max_ios settings, with kernel read-ahead on, off
(POSIX_FADV_RANDOM) and O_DIRECT, on the thread-pool engine.

options:
  --file PATH|URL     data file (default target/pagestream-data/
                      seqscan-<size>.dat, created, stamped, if absent), or
                      an object: s3://bucket/key (endpoint and credentials
                      from AWS_ENDPOINT, AWS_ACCESS_KEY_ID,
                      AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP) or
                      http(s)://host/path, read with range GETs by the
                      object-store engine: one mode, object (--modes and
                      --create are errors; nothing is made cold)
  --create            with --file: create PATH (stamped, --size bytes) if it
                      does not exist; without it a missing PATH is an error
  --size SIZE         size of a file to create (default 1GiB)
  --density D         fraction of tuples that match, 0 < D <= 1 (default 0.001)
  --pattern P         uniform | clustered (default uniform)
  --cluster N         clustered: pages per matching run (default 16)
  --exact-pages N     most exact pages in the bitmap; the densest pages past
                      it become lossy (default 0: no limit)
  --seed N            seed of the matching tuples (default 1)
  --max-ios LIST      comma-separated max_ios values (default 0,1,2,4,8,16)
  --modes LIST        readahead,random,direct or a subset (default all three)
  --combine N         io_combine_limit (default 16; 4MiB of blocks for a URL)
  --gap-limit N       read through holes of up to N unselected blocks between
                      selected ones when all are misses (default 0: off); the
                      pages read but not selected are counted as gap_blocks
  --pool-frames N     buffer pool frames (default 16384)
  --block-size SIZE   block size (default 8KiB; at least 512)
  --repeat N          runs of each setting (default 3; medians)
  --json              one JSON object per run on stdout instead of the table
  --help              this text";

/// Bytes per tuple: a page of `block_size` holds `block_size / 256`.
const TUPLE: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    Uniform,
    Clustered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Readahead,
    Random,
    Direct,
    /// An object URL: range GETs (no page cache, no read-ahead).
    Object,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Readahead => "readahead",
            Mode::Random => "random",
            Mode::Direct => "direct",
            Mode::Object => "object",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Mode::Readahead => "readahead on",
            Mode::Random => "readahead off",
            Mode::Direct => "O_DIRECT",
            Mode::Object => "object (range GETs)",
        }
    }
}

#[derive(Debug, clap::Parser)]
struct Opts {
    #[command(flatten)]
    data: FileArgs,
    #[arg(long, default_value = "0.001", value_parser = number::<f64>)]
    density: f64,
    #[arg(long, default_value = "uniform", value_parser = |s: &str| match s {
        "uniform" => Ok(Pattern::Uniform),
        "clustered" => Ok(Pattern::Clustered),
        _ => Err(format!("{s:?}: expected uniform or clustered")),
    })]
    pattern: Pattern,
    #[arg(long, default_value = "16", value_parser = number::<u64>)]
    cluster: u64,
    #[arg(long, default_value = "0", value_parser = number::<usize>)]
    exact_pages: usize,
    #[arg(long, default_value = "1", value_parser = number::<u64>)]
    seed: u64,
    #[arg(long, default_value = "0,1,2,4,8,16", value_parser = |s: &str| {
        parse_list(s, |x| {
            x.parse::<usize>()
                .map_err(|_| format!("{x:?} is not a number"))
        })
    })]
    max_ios: List<usize>,
    /// `--modes` as given (`None`: all three, or object for a URL).
    #[arg(long = "modes", value_parser = |s: &str| {
        parse_list(s, |x| match x {
            "readahead" => Ok(Mode::Readahead),
            "random" => Ok(Mode::Random),
            "direct" => Ok(Mode::Direct),
            _ => Err(format!("{x:?}: expected readahead, random or direct")),
        })
    })]
    modes_given: Option<List<Mode>>,
    /// The modes to run (set by `check`).
    #[arg(skip)]
    modes: List<Mode>,
    /// `--combine` as given (`None`: the default for the file).
    #[arg(long = "combine", value_parser = number::<usize>)]
    combine_given: Option<usize>,
    /// `io_combine_limit` (set by `check`).
    #[arg(skip)]
    combine: usize,
    #[arg(long = "gap-limit", default_value = "0", value_parser = number::<usize>)]
    gap_limit: usize,
    #[arg(long, default_value = "16384", value_parser = number::<usize>)]
    pool_frames: usize,
    #[arg(long, default_value = "8KiB", value_parser = parse_block_size)]
    block_size: usize,
    #[arg(long, default_value = "3", value_parser = number::<usize>)]
    repeat: usize,
    #[arg(long)]
    json: bool,
}

fn parse_list<T>(s: &str, one: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    let v: Vec<T> = s
        .split(',')
        .map(|x| one(x.trim()))
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err(format!("{s:?}: empty list"));
    }
    Ok(v)
}

/// The checks across flags; sets `modes` and `combine`.
fn check(mut o: Opts) -> Result<Opts, UsageError> {
    let bad = |m: String| Err(UsageError(m));
    o.data.check()?;
    let url = o.data.url().map(str::to_owned);
    o.modes =
        match (&url, o.modes_given.take()) {
            (Some(url), Some(_)) => return Err(not_for_url(
                "--modes",
                url,
                "readahead, random and direct are ways to read a local file; an object is read \
                 with range GETs (leave --modes out)",
            )),
            (Some(_), None) => vec![Mode::Object],
            (None, Some(m)) => m,
            (None, None) => vec![Mode::Readahead, Mode::Random, Mode::Direct],
        };
    o.combine = combine_for(url.is_some(), o.combine_given, o.block_size);
    if !(o.density > 0.0 && o.density <= 1.0) {
        return bad(format!(
            "--density must be above 0 and at most 1 (got {})",
            o.density
        ));
    }
    if o.cluster == 0 {
        return bad("--cluster must be at least 1".into());
    }
    at_least_one("repeat", o.repeat)?;
    at_least_one("pool-frames", o.pool_frames)?;
    check_combine(o.combine)?;
    for &m in &o.max_ios {
        check_max_ios(m)?;
    }
    check_block_size(o.block_size, o.data.size)?;
    if o.block_size < TUPLE {
        return bad(format!(
            "--block-size {} is smaller than one {TUPLE}-byte tuple",
            o.block_size
        ));
    }
    Ok(o)
}

/// splitmix64: the seeded hash behind the matching tuples and cluster
/// placement.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The query's condition, which a lossy page's tuples are rechecked
/// against.
struct Condition {
    pattern: Pattern,
    seed: u64,
    /// Uniform: a tuple matches when its hash is below this.
    threshold: u64,
    /// Clustered: one flag per block.
    blocks: Vec<bool>,
}

impl Condition {
    fn new(o: &Opts, nblocks: u64) -> Condition {
        let threshold = if o.density >= 1.0 {
            u64::MAX
        } else {
            (o.density * u64::MAX as f64) as u64
        };
        let mut blocks = Vec::new();
        if o.pattern == Pattern::Clustered {
            blocks = vec![false; nblocks as usize];
            let want = ((nblocks as f64 * o.density).round() as u64).clamp(1, nblocks);
            let mut have = 0u64;
            let mut i = 0u64;
            while have < want {
                let start = mix(o.seed ^ 0xC1u64.wrapping_mul(i + 1)) % nblocks;
                i += 1;
                for b in start..(start + o.cluster).min(nblocks) {
                    if have < want && !blocks[b as usize] {
                        blocks[b as usize] = true;
                        have += 1;
                    }
                }
            }
        }
        Condition {
            pattern: o.pattern,
            seed: o.seed,
            threshold,
            blocks,
        }
    }

    #[inline]
    fn matches(&self, block: u64, tuple: usize) -> bool {
        match self.pattern {
            Pattern::Uniform => {
                mix(self.seed ^ mix(block.wrapping_mul(1 << 16) | tuple as u64)) <= self.threshold
            }
            Pattern::Clustered => self.blocks[block as usize],
        }
    }
}

/// A block's entry in the bitmap, carried through the stream as its data.
#[derive(Debug, Clone)]
enum Tuples {
    /// The matching tuples' numbers.
    Exact(Vec<u16>),
    /// Some tuples match; visit all and recheck.
    Lossy,
}

/// The bitmap: blocks with a match, in order.
struct Bitmap {
    entries: Vec<(u64, Tuples)>,
    tuples: u64,
    lossy: usize,
}

impl Bitmap {
    fn build(cond: &Condition, nblocks: u64, per_page: usize, exact_pages: usize) -> Bitmap {
        let mut entries = Vec::new();
        let mut tuples = 0u64;
        for b in 0..nblocks {
            let m: Vec<u16> = (0..per_page)
                .filter(|&t| cond.matches(b, t))
                .map(|t| t as u16)
                .collect();
            if !m.is_empty() {
                tuples += m.len() as u64;
                entries.push((b, Tuples::Exact(m)));
            }
        }
        let mut lossy = 0;
        if exact_pages > 0 && entries.len() > exact_pages {
            // Lossify the densest pages first: they lose the least.
            let mut by_count: Vec<usize> = (0..entries.len()).collect();
            by_count.sort_by_key(|&i| match &entries[i].1 {
                Tuples::Exact(v) => std::cmp::Reverse(v.len()),
                Tuples::Lossy => std::cmp::Reverse(usize::MAX),
            });
            lossy = entries.len() - exact_pages;
            for &i in &by_count[..lossy] {
                entries[i].1 = Tuples::Lossy;
            }
        }
        Bitmap {
            entries,
            tuples,
            lossy,
        }
    }
}

/// What a run saw of the matching tuples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Visit {
    tuples: u64,
    sum: u64,
    pages: u64,
}

impl Visit {
    #[inline]
    fn add(&mut self, block: u64, t: usize, page: &[u8]) {
        let at = t * TUPLE;
        let head = u64::from_le_bytes(page[at..at + 8].try_into().expect("8 bytes"));
        let next = u64::from_le_bytes(page[at + 8..at + 16].try_into().expect("8 bytes"));
        self.sum = self
            .sum
            .wrapping_add(mix(block ^ mix((t as u64) ^ mix(head ^ mix(next)))));
        self.tuples += 1;
    }
}

struct Run {
    mode: Mode,
    max_ios: usize,
    rep: usize,
    seconds: f64,
    visit: Visit,
    stats: StreamStats,
    resident_before: f64,
}

/// What reads the blocks.
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

struct Scanner<'a> {
    o: &'a Opts,
    path: PathBuf,
    reader: Reader,
    bitmap: &'a Bitmap,
    cond: &'a Condition,
    per_page: usize,
}

impl Scanner<'_> {
    fn run(&self, mode: Mode, max_ios: usize, rep: usize) -> io::Result<Run> {
        let o = self.o;
        match &self.reader {
            Reader::Local { engine, plain } => {
                let resident_before = cache::make_cold(plain, &self.path)?;
                let opts = OpenOptions::new()
                    .block_size(o.block_size)
                    .direct(mode == Mode::Direct)
                    .advice(if mode == Mode::Random {
                        FileAdvice::Random
                    } else {
                        FileAdvice::Normal
                    });
                let file = ThreadPoolFile::open_with(&self.path, opts)?;
                self.scan(engine.clone(), file, mode, max_ios, rep, resident_before)
            }
            Reader::Object(r) => {
                let file = r.open(&self.path.display().to_string())?;
                self.scan(r.engine(), file, mode, max_ios, rep, 0.0)
            }
        }
    }

    /// One run over the bitmap's blocks of `file`, on `engine`.
    fn scan<E: IoEngine>(
        &self,
        engine: E,
        file: E::File,
        mode: Mode,
        max_ios: usize,
        rep: usize,
        resident_before: f64,
    ) -> io::Result<Run> {
        let o = self.o;
        let pool = BufferPool::new(o.pool_frames, o.block_size).map_err(io::Error::from)?;
        let mut stream = ReadStream::builder(&pool, engine, file)
            .max_ios(max_ios)
            .io_combine_limit(o.combine)
            .gap_limit(o.gap_limit)
            .build(source::with_data(self.bitmap.entries.iter().cloned()))
            .map_err(io::Error::from)?;
        let start = Instant::now();
        let visit = block_on(async {
            let mut v = Visit::default();
            while let Some(page) = stream.next().await {
                let page = page?;
                let b = page.block();
                v.pages += 1;
                match page.data() {
                    Tuples::Exact(ts) => {
                        for &t in ts {
                            v.add(b, usize::from(t), &page);
                        }
                    }
                    Tuples::Lossy => {
                        for t in 0..self.per_page {
                            if self.cond.matches(b, t) {
                                v.add(b, t, &page);
                            }
                        }
                    }
                }
            }
            Ok::<_, io::Error>(v)
        })?;
        let seconds = start.elapsed().as_secs_f64();
        let stats = block_on(stream.close());
        Ok(Run {
            mode,
            max_ios,
            rep,
            seconds,
            visit,
            stats,
            resident_before,
        })
    }
}

fn json(o: &Opts, r: &Run, path: &str, blocks: u64, bitmap: &Bitmap) -> JsonObject {
    let mut j = JsonObject::default();
    let bytes = r.visit.pages * o.block_size as u64;
    let object = r.mode == Mode::Object;
    j.set(
        "runtime",
        if object { "object-store" } else { "threadpool" },
    )
    .set("cache", if object { "none" } else { "cold" })
    .set("mode", r.mode.name())
    .set("direct", r.mode == Mode::Direct)
    .set("readahead", r.mode == Mode::Readahead)
    .set("max_ios", r.max_ios)
    .set("io_combine_limit", o.combine)
    .set("gap_limit", o.gap_limit)
    .set(
        "pattern",
        if o.pattern == Pattern::Uniform {
            "uniform"
        } else {
            "clustered"
        },
    )
    .set("density", o.density)
    .set("blocks", blocks)
    .set("matching_blocks", bitmap.entries.len())
    .set("matching_tuples", bitmap.tuples)
    .set("lossy_pages", bitmap.lossy)
    .set("pages", r.visit.pages)
    .set("bytes", bytes)
    .set("tuples", r.visit.tuples)
    .set("seconds", r.seconds)
    .set("mib_per_s", mib_per_s(bytes, r.seconds))
    .set("pages_per_s", r.visit.pages as f64 / r.seconds)
    .set("reads", r.stats.reads)
    .set("gap_blocks", r.stats.gap_blocks)
    .set("mean_blocks_per_read", r.stats.mean_blocks_per_read())
    .set("max_in_flight", r.stats.max_in_flight)
    .set("advice", r.stats.advice)
    .set("waits", r.stats.waits)
    .set("resident_before", r.resident_before)
    .set("checksum", r.visit.sum)
    .set("run", r.rep)
    .set("file", path);
    j
}

fn run(o: Opts) -> io::Result<()> {
    let (path, nblocks) = o.data.scan_file("bitmapscan", o.block_size)?;
    let per_page = o.block_size / TUPLE;
    let cond = Condition::new(&o, nblocks);
    let bitmap = Bitmap::build(&cond, nblocks, per_page, o.exact_pages);
    let path_s = path.display().to_string();
    let reader = match o.data.url() {
        Some(_) => Reader::Object(ObjectReader::start()?),
        None => Reader::Local {
            engine: ThreadPoolEngine::new(),
            plain: File::open(&path)?,
        },
    };
    let scanner = Scanner {
        o: &o,
        reader,
        path,
        bitmap: &bitmap,
        cond: &cond,
        per_page,
    };
    let pattern = match o.pattern {
        Pattern::Uniform => "uniform".to_string(),
        Pattern::Clustered => format!("clustered, runs of {} pages", o.cluster),
    };
    let head = format!(
        "bitmapscan {path_s}: {nblocks} blocks of {} ({}), {per_page} tuples per page; density {} ({pattern}): \
         {} matching tuples on {} blocks ({:.1}% of blocks), {} lossy; io_combine_limit {}, {}, \
         {} run(s) each",
        o.block_size,
        format_size(nblocks * o.block_size as u64),
        o.density,
        bitmap.tuples,
        bitmap.entries.len(),
        100.0 * bitmap.entries.len() as f64 / nblocks as f64,
        bitmap.lossy,
        o.combine,
        if o.data.url().is_some() {
            "object-store"
        } else {
            "cold, threadpool"
        },
        o.repeat
    );
    if o.json {
        eprintln!("{head}");
    } else {
        println!("{head}");
    }
    let mut runs = Vec::new();
    for rep in 0..o.repeat {
        for &m in &o.max_ios {
            for &mode in &o.modes {
                let r = scanner.run(mode, m, rep)?;
                if o.json {
                    println!("{}", json(&o, &r, &path_s, nblocks, &bitmap).to_line());
                } else {
                    eprint!(".");
                }
                runs.push(r);
            }
        }
    }
    if !o.json {
        eprintln!();
    }
    // Every run visited the same tuples.
    let first = runs[0].visit;
    if let Some(bad) = runs
        .iter()
        .find(|r| r.visit.sum != first.sum || r.visit.tuples != first.tuples)
    {
        return Err(io::Error::other(format!(
            "runs disagree: {} max_ios {} saw {} tuples (checksum {}), the first run {} ({})",
            bad.mode.name(),
            bad.max_ios,
            bad.visit.tuples,
            bad.visit.sum,
            first.tuples,
            first.sum
        )));
    }
    if first.tuples != bitmap.tuples {
        return Err(io::Error::other(format!(
            "the scan visited {} matching tuples, the bitmap holds {}",
            first.tuples, bitmap.tuples
        )));
    }
    let mut out = String::new();
    {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "\nmedian ms (min–max) [reads × blocks/read, most in flight]"
        );
        let _ = write!(out, "{:>7}", "max_ios");
        for &mode in &o.modes {
            let _ = write!(out, "  {:<36}", mode.title());
        }
        let _ = writeln!(out);
        for &m in &o.max_ios {
            let _ = write!(out, "{m:>7}");
            for &mode in &o.modes {
                let these: Vec<&Run> = runs
                    .iter()
                    .filter(|r| r.max_ios == m && r.mode == mode)
                    .collect();
                let secs: Vec<f64> = these.iter().map(|r| r.seconds * 1e3).collect();
                let s = Spread::of(&secs).expect("runs");
                let r = these[0];
                let cell = format!(
                    "{:.0} ({:.0}–{:.0}) [{}×{:.1}, {}]",
                    s.median,
                    s.min,
                    s.max,
                    r.stats.reads,
                    r.stats.mean_blocks_per_read(),
                    r.stats.max_in_flight
                );
                let _ = write!(out, "  {cell:<36}");
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "{} tuples, checksum {} (all runs agree)",
            first.tuples, first.sum
        );
    }
    print_summary(o.json, &out);
    Ok(())
}

fn main() {
    args::clap_main("bitmapscan", USAGE, check, run);
}
