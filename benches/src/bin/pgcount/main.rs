//! `pgcount`: `select count(*), sum(first column)` over a PostgreSQL heap
//! relation's files, read through one pagestream [`ReadStream`] that spans
//! every segment file (`PATH`, `PATH.1`, `PATH.2`, …), with the page format
//! parsed and checked by [`heap`].
//!
//! ```text
//! cargo run --release --bin pgcount -- PATH [--runtime NAME|all] [--cache none|cold|warm|hot|all] [--json] …
//! ```
//!
//! The segments are one file to the stream
//! ([`pagestream::segmented::Segmented`]): look-ahead runs across a segment
//! boundary, no read does. What is counted, and what that assumes (no
//! transaction in progress, the table vacuumed, the server stopped or the
//! table checkpointed), is in the `heap` module's docs. A file that is not
//! a heap relation of 8 KiB pages is an error naming the file and block, and
//! exit code 1.
//!
//! Cache modes as in `seqscan`: `cold` evicts every segment from the OS page
//! cache first, `warm` evicts them and reads them whole into it first,
//! `hot` fills a pool holding the whole relation with one scan and times a
//! second, which must read nothing; `none` (the default) scans the files as
//! they are.
//!
//! PATH may be an object URL instead (`s3://bucket/base/5/16384`,
//! `http(s)://host/base/5/16384`): the relation is read straight from the
//! bucket or server by the `object-store` runtime
//! ([`pagestream_bench::object`]). Its segments are found by a `HEAD` of
//! `URL`, `URL.1`, `URL.2`, … until one is missing (an object store cannot
//! in general list a prefix cheaply; on S3 a missing object answers 404
//! only with permission to list the bucket, `s3:ListBucket`, and 403
//! otherwise, which is an error), and read as one [`Segmented`] stream of
//! [`ObjectFile`](pagestream_object_store::ObjectFile)s. Cache modes `none`
//! and `hot` apply; `cold` and `warm` (the OS page cache), `--direct` and
//! `--baseline` (a copy of the local files in memory) are usage errors.

// The page format in full (every flag, a page builder for the tests), of
// which the count reads a part.
#[allow(dead_code)]
mod heap;

use clap::ArgAction;
use futures::StreamExt;
use heap::{Counts, TupleOrder, BLCKSZ};
use pagestream::segmented::{segment_paths, Segmented, SegmentedFile, PG_SEGMENT_BYTES};
use pagestream::EngineFile;
use pagestream::{source, BufferPool, ReadStream, RingSize, StreamStats};
use pagestream_bench::args::{
    self, at_least_one, check_combine, check_max_ios, format_size, number, parse_on_off,
    parse_runtimes, parse_size, List, UsageError,
};
use pagestream_bench::cache::{self, Cache};
use pagestream_bench::object::{self, combine_for, max_ios_for, not_for_url, NO_DIRECT};
use pagestream_bench::timing::{mib_per_s, print_summary, JsonObject, Spread};
use pagestream_runtimes::{Env, FileOptions, Options, Runtime, Workload};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

const USAGE: &str = "\
usage: pgcount PATH|URL [options]

Counts the live tuples of a PostgreSQL heap relation (what select count(*)
returns on a vacuumed table with no transaction in progress) and sums its
first column as an int4, reading the relation's segment files PATH, PATH.1,
PATH.2, ... through one pagestream ReadStream. PATH is the relation's first
segment file: $PGDATA/$(psql -Atc \"select pg_relation_filepath('t')\").
Stop the server (or CHECKPOINT with no writes since) before scanning.

URL instead of PATH reads the relation's segments from object storage:
s3://bucket/base/5/16384 (endpoint and credentials from AWS_ENDPOINT,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP) or
http(s)://host/base/5/16384, with the object-store runtime (range GETs).
The segments URL, URL.1, URL.2, ... are found by a HEAD of each until one
is missing (on S3 that needs permission to list the bucket, or a missing
object answers 403, an error). For a URL: --runtime may only say
object-store; --cache none or hot (cold and warm are OS page cache states,
which an object is not read through); --direct and --baseline are errors.

options:
  --runtime NAME      threadpool | tokio-uring | glommio | uring | uring-tokio
                      | all, or a
                      comma-separated list (default threadpool; object-store
                      for a URL); glommio reads with O_DIRECT only (no warm
                      runs)
  --cache MODE        none | cold | warm | hot | all (default none: scan the
                      files as they are); all = cold, warm, hot
  --direct            open the files with O_DIRECT (no warm runs)
  --max-ios N         reads in flight at most (default 16; 64 for a URL)
  --combine N         io_combine_limit, blocks per read (default 16; 512,
                      4MiB, for a URL)
  --pool-frames N     buffer pool frames for none/cold/warm runs (default
                      16384; hot uses a pool holding the whole relation)
  --prefetch on|off   prefetch the next page's first cache lines when a page
                      is handed out (default on, the library's default)
  --tuple-order lp|reverse  visit a page's line pointers from the first
                      (default) or from the last (tuples in ascending
                      memory order on a page filled by inserts)
  --repeat N          runs of each mode (default 1; with more, medians)
  --no-sum            do not sum the first column (use when it is not an
                      int4: the heap does not say, the catalog does)
  --segment-size SIZE segment file size (default 1GiB, PostgreSQL's; for
                      servers built --with-segsize, and tests)
  --baseline          hot runs: also count the same pages held in one plain
                      buffer in memory, without a stream (runtime in-memory),
                      to show the stream's cost per page; needs the
                      relation's size in memory again
  --json              one JSON object per run on stdout instead of the table
  --help              this text";

#[derive(Debug, clap::Parser)]
struct Opts {
    /// PATH as given (`None` is a usage error).
    #[arg(value_name = "PATH")]
    relation: Option<PathBuf>,
    /// The relation's first segment file, or its URL (set by `check`).
    #[arg(skip)]
    path: PathBuf,
    /// `--runtime` as given (`None`: threadpool, or object-store for a URL).
    #[arg(long = "runtime", value_parser = parse_runtimes)]
    runtime: Option<List<Runtime>>,
    /// The runtimes to run (set by `check`).
    #[arg(skip)]
    runtimes: List<Runtime>,
    /// `--cache` as given (`None`: none).
    #[arg(long = "cache", value_parser = |s: &str| {
        let all = [Cache::Cold, Cache::Warm, Cache::Hot];
        Cache::parse(s, &[Cache::None, Cache::Cold, Cache::Warm, Cache::Hot], Some(&all))
    })]
    cache: Option<List<Cache>>,
    /// The cache states to run (set by `check`).
    #[arg(skip)]
    modes: Vec<Cache>,
    #[arg(long)]
    direct: bool,
    /// `--max-ios` as given (`None`: the default for PATH or URL).
    #[arg(long = "max-ios", value_parser = number::<usize>)]
    max_ios_given: Option<usize>,
    /// Reads in flight (set by `check`).
    #[arg(skip)]
    max_ios: usize,
    /// `--combine` as given (`None`: the default for PATH or URL).
    #[arg(long = "combine", value_parser = number::<usize>)]
    combine_given: Option<usize>,
    /// `io_combine_limit` (set by `check`).
    #[arg(skip)]
    combine: usize,
    #[arg(long, default_value = "16384", value_parser = number::<usize>)]
    pool_frames: usize,
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    prefetch: bool,
    #[arg(long, default_value = "lp", value_parser = |s: &str| match s {
        "lp" => Ok(TupleOrder::LinePointer),
        "reverse" => Ok(TupleOrder::Reverse),
        _ => Err(format!("{s:?}: expected lp or reverse")),
    })]
    tuple_order: TupleOrder,
    #[arg(long, default_value = "1", value_parser = number::<usize>)]
    repeat: usize,
    #[arg(long = "no-sum", action = ArgAction::SetFalse)]
    sum: bool,
    #[arg(long = "segment-size", default_value_t = PG_SEGMENT_BYTES, value_parser = parse_size)]
    segment_bytes: u64,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    baseline: bool,
}

/// The checks across flags; sets `path`, `runtimes`, `modes`, `max_ios`
/// and `combine`.
fn check(mut o: Opts) -> Result<Opts, UsageError> {
    let bad = |m: String| Err(UsageError(m));
    let Some(path) = o.relation.take() else {
        return bad("no PATH: name the relation's first segment file (or its URL)".into());
    };
    o.path = path;
    let url = object::url_of(&o.path).map(str::to_owned);
    o.runtimes = object::runtimes_for(Some(&o.path), o.runtime.take(), &[Runtime::ThreadPool])?;
    at_least_one("repeat", o.repeat)?;
    o.combine = combine_for(url.is_some(), o.combine_given, BLCKSZ);
    o.max_ios = max_ios_for(url.is_some(), o.max_ios_given);
    check_combine(o.combine)?;
    check_max_ios(o.max_ios)?;
    at_least_one("pool-frames", o.pool_frames)?;
    if o.segment_bytes == 0 || o.segment_bytes % BLCKSZ as u64 != 0 {
        return bad(format!(
            "--segment-size {} must be a positive multiple of 8KiB",
            o.segment_bytes
        ));
    }
    match &url {
        Some(url) => {
            if o.direct {
                return Err(not_for_url("--direct", url, NO_DIRECT));
            }
            if o.baseline {
                return Err(not_for_url(
                    "--baseline",
                    url,
                    "the baseline counts a copy of the relation's local files in memory",
                ));
            }
            o.modes = object::url_modes(url, o.cache.take(), &[Cache::None])?;
        }
        None => {
            o.modes = cache::check_modes(o.direct, o.cache.take(), &[Cache::None], &o.runtimes)?
        }
    }
    Ok(o)
}

/// Most segments a relation may have: a server that answers every name
/// (as some answer every path with a page) must not make the search for
/// segments endless. 65536 segments of PostgreSQL's 1 GiB are 64 TiB.
const MAX_SEGMENTS: usize = 1 << 16;

/// Finds the segments of the relation whose first segment is the object
/// `first` (a URL), as PostgreSQL names them: a `HEAD` of `first`,
/// `first.1`, `first.2`, … until one is missing; returns their names and
/// lengths. A missing `first` is an error naming it; so is any other error
/// of a `HEAD`. After a segment shorter than `segment_bytes` (the
/// relation's end), the search stops at the first non-empty one, which
/// [`Relation::open`] refuses.
struct FindSegments<'a> {
    first: &'a str,
    segment_bytes: u64,
}

impl Workload for FindSegments<'_> {
    type Output = io::Result<Vec<(PathBuf, u64)>>;

    async fn run<E: Env>(self, env: E) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut found: Vec<(PathBuf, u64)> = Vec::new();
        let mut ended = false;
        loop {
            let n = found.len();
            if n == MAX_SEGMENTS {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: {MAX_SEGMENTS} segments and more: does the server answer every \
                         name?",
                        self.first
                    ),
                ));
            }
            let name = match n {
                0 => self.first.to_string(),
                n => format!("{}.{n}", self.first),
            };
            let name = PathBuf::from(name);
            let len = match env.open(&name, FileOptions::buffered(BLCKSZ)).await {
                Ok(f) => f.byte_len()?,
                Err(e) if n > 0 && e.kind() == io::ErrorKind::NotFound => return Ok(found),
                // A missing first segment names its URL (and says not found).
                Err(e) => return Err(e),
            };
            found.push((name, len));
            if ended && len > 0 {
                return Ok(found);
            }
            ended |= len < self.segment_bytes;
        }
    }
}

/// The relation: its segment files (or objects) and their blocks.
struct Relation {
    o: Opts,
    paths: Vec<PathBuf>,
    /// A buffered handle per segment, for cache control (none for a URL).
    plain: Vec<File>,
    /// Whether the segments are objects (PATH was a URL).
    url: bool,
    nblocks: u64,
}

impl Relation {
    /// Finds and checks the segment files of `o.path`.
    ///
    /// As PostgreSQL's `mdnblocks`, the relation ends at the first segment
    /// shorter than a full one; segment files after it must be empty
    /// (PostgreSQL truncates segments a vacuum cut off to zero length and
    /// leaves them) and are not scanned. A non-empty one is an error: the
    /// segment size is wrong, or the files are not one relation.
    fn open(o: Opts) -> io::Result<Relation> {
        // A free space map, visibility map or init fork looks like empty
        // heap pages (its data sits where a heap page has free space): only
        // its name tells.
        let name = o.path.file_name().map(|n| n.to_string_lossy().into_owned());
        if let Some((_, fork)) = name.as_deref().and_then(|n| n.rsplit_once('_')) {
            let fork = fork.split('.').next().unwrap_or(fork);
            let what = match fork {
                "fsm" => Some("free space map"),
                "vm" => Some("visibility map"),
                "init" => Some("init fork (an unlogged relation's empty copy)"),
                _ => None,
            };
            if let Some(what) = what {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: not a heap relation's data: this is its {what}; name the file \
                         without _{fork}",
                        o.path.display()
                    ),
                ));
            }
        }
        // Every segment's name, length and (local files) buffered handle.
        let mut found: Vec<(PathBuf, u64, Option<File>)> = Vec::new();
        let url = object::url_of(&o.path).map(str::to_owned);
        match &url {
            Some(first) => {
                let find = FindSegments {
                    first,
                    segment_bytes: o.segment_bytes,
                };
                for (p, len) in Runtime::ObjectStore.run(find)?? {
                    found.push((p, len, None));
                }
            }
            None => {
                for p in segment_paths(&o.path)? {
                    let f = File::open(&p).map_err(|e| named(&p, e))?;
                    let m = f.metadata().map_err(|e| named(&p, e))?;
                    if !m.is_file() {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("{}: not a regular file", p.display()),
                        ));
                    }
                    found.push((p, m.len(), Some(f)));
                }
            }
        }
        let mut paths: Vec<PathBuf> = found.iter().map(|(p, _, _)| p.clone()).collect();
        let mut plain = Vec::new();
        let mut kept = 0;
        let mut total = 0u64;
        // The first segment shorter than a full one: the relation's end.
        let mut partial: Option<(usize, u64)> = None;
        for (i, (p, len, f)) in found.into_iter().enumerate() {
            let bad = |why: String| {
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {len} bytes{why}", p.display()),
                ))
            };
            if let Some((k, klen)) = partial {
                if len != 0 {
                    return bad(format!(
                        " after {}, a partial segment of {klen} bytes: segments after the \
                         relation's end must be empty (is the segment size {}? --segment-size)",
                        paths[k].display(),
                        format_size(o.segment_bytes)
                    ));
                }
                continue;
            }
            if len % BLCKSZ as u64 != 0 {
                return bad(
                    " is not a multiple of 8192: not a PostgreSQL relation of 8 KiB pages".into(),
                );
            }
            if len > o.segment_bytes {
                return bad(format!(
                    ", more than a segment of {} bytes ({}; --segment-size)",
                    o.segment_bytes,
                    format_size(o.segment_bytes)
                ));
            }
            if len < o.segment_bytes {
                partial = Some((i, len));
            }
            total += len;
            kept += 1;
            plain.extend(f);
        }
        // Empty segment files past the end are not part of the relation.
        paths.truncate(kept);
        Ok(Relation {
            nblocks: total / BLCKSZ as u64,
            url: url.is_some(),
            o,
            paths,
            plain,
        })
    }

    fn bytes(&self) -> u64 {
        self.nblocks * BLCKSZ as u64
    }

    /// A page error, naming the relation, and the segment file and block in
    /// it when the relation has several.
    fn page_error(&self, e: heap::PageError) -> io::Error {
        let seg_blocks = self.o.segment_bytes / BLCKSZ as u64;
        let seg = (e.block / seg_blocks) as usize;
        let where_ = if self.paths.len() > 1 {
            format!(
                " (segment file {}, its block {})",
                self.paths[seg.min(self.paths.len() - 1)].display(),
                e.block % seg_blocks
            )
        } else {
            String::new()
        };
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}{where_}", self.o.path.display()),
        )
    }

    fn make_cold(&self) -> io::Result<f64> {
        self.by_bytes(cache::make_cold)
    }

    fn make_warm(&self) -> io::Result<f64> {
        self.by_bytes(cache::make_warm)
    }

    /// `f`'s fraction for each segment file, weighted by the segment's
    /// size: the fraction of the relation's bytes (0 for objects, and for
    /// an empty relation).
    fn by_bytes(&self, f: impl Fn(&File, &Path) -> io::Result<f64>) -> io::Result<f64> {
        let (mut part, mut total) = (0.0, 0.0);
        for (file, p) in self.plain.iter().zip(&self.paths) {
            let len = file.metadata().map_err(|e| named(p, e))?.len() as f64;
            part += f(file, p)? * len;
            total += len;
        }
        Ok(if total > 0.0 { part / total } else { 0.0 })
    }

    /// Every page of the relation in one buffer.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let mut all = Vec::with_capacity(usize::try_from(self.bytes()).unwrap_or(0));
        for (f, p) in self.plain.iter().zip(&self.paths) {
            let mut f = f;
            io::Seek::seek(&mut f, io::SeekFrom::Start(0)).map_err(|e| named(p, e))?;
            io::Read::read_to_end(&mut f, &mut all).map_err(|e| named(p, e))?;
        }
        if all.len() as u64 != self.bytes() {
            return Err(io::Error::other(format!(
                "{}: the relation changed size while being read",
                self.o.path.display()
            )));
        }
        Ok(all)
    }

    /// The baseline: the same count over `pages` in memory, no stream.
    fn in_memory(&self, pages: &[u8], rep: usize) -> io::Result<Run> {
        let start = Instant::now();
        let mut counts = Counts::default();
        for (b, page) in pages.chunks_exact(BLCKSZ).enumerate() {
            heap::count_page_in(b as u64, page, self.o.sum, self.o.tuple_order, &mut counts)
                .map_err(|e| self.page_error(e))?;
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(Run {
            runtime: "in-memory",
            mode: Cache::Hot,
            direct: false,
            rep,
            counts,
            seconds,
            resident_before: 1.0,
            pool_frames: 0,
            stats: StreamStats::default(),
        })
    }

    /// The fraction of the relation in the OS page cache (0 for objects).
    fn resident(&self) -> io::Result<f64> {
        self.by_bytes(|f, _| cache::resident_fraction(f))
    }
}

/// `e`, with `p` in front unless its message names `p` already (an
/// object's errors name its URL).
fn named(p: &Path, e: io::Error) -> io::Error {
    let p = p.display().to_string();
    if e.to_string().contains(&p) {
        return e;
    }
    io::Error::new(e.kind(), format!("{p}: {e}"))
}

/// One timed run.
struct Run {
    runtime: &'static str,
    mode: Cache,
    direct: bool,
    rep: usize,
    counts: Counts,
    seconds: f64,
    resident_before: f64,
    pool_frames: usize,
    stats: StreamStats,
}

impl Run {
    fn label(&self) -> String {
        format!("{} {}", self.runtime, self.mode.name())
    }

    fn json(&self, rel: &Relation) -> String {
        let o = &rel.o;
        let c = &self.counts;
        let bytes = c.pages * BLCKSZ as u64;
        let s = &self.stats;
        let mut j = JsonObject::default();
        j.set("tuples", c.tuples)
            .set("pages", c.pages)
            .set("seconds", self.seconds)
            .set("pages_per_s", c.pages as f64 / self.seconds)
            .set("mib_per_s", mib_per_s(bytes, self.seconds))
            .set("reads", s.reads)
            .set("mean_blocks_per_read", s.mean_blocks_per_read())
            .set("cache", self.mode.name())
            .set("runtime", self.runtime)
            .set("run", self.rep)
            .set("direct", self.direct)
            .set("summed", o.sum)
            .set("non_null", c.non_null)
            .set("new_pages", c.new_pages)
            .set("invisible", c.invisible)
            .set("redirects", c.redirects)
            .set("dead_line_pointers", c.dead)
            .set("unused_line_pointers", c.unused)
            .set("segments", rel.paths.len())
            .set("bytes", bytes)
            .set("file", o.path.display().to_string())
            .set("max_ios", o.max_ios)
            .set("io_combine_limit", o.combine)
            .set("prefetch", o.prefetch)
            .set(
                "tuple_order",
                match o.tuple_order {
                    TupleOrder::LinePointer => "lp",
                    TupleOrder::Reverse => "reverse",
                },
            )
            .set("pool_frames", self.pool_frames)
            .set("resident_before", self.resident_before)
            .set("hits", s.hits)
            .set("blocks_read", s.blocks_read)
            .set("max_blocks_per_read", s.max_blocks_per_read)
            .set("max_in_flight", s.max_in_flight)
            .set("waits", s.waits)
            .set("wait_seconds", s.wait_time.as_secs_f64())
            .set("mean_distance", s.mean_distance())
            .set("mean_pinned", s.mean_pinned())
            .set("fast_path_pages", s.fast_path_pages);
        // `sum` is a signed 64-bit number or null, which the shared JSON
        // writer has no variant for: put it in by hand, after `tuples`.
        let sum = match (o.sum, c.sum_value()) {
            (true, Some(v)) => v.to_string(),
            _ => "null".into(),
        };
        let line = j.to_line();
        let at = line.find(",\"pages\":").expect("pages field");
        format!("{},\"sum\":{sum}{}", &line[..at], &line[at..])
    }
}

/// The scans on one runtime: every repeat of every mode that runs on it.
struct Scans<'a> {
    rel: &'a Relation,
    runtime: Runtime,
}

impl Workload for Scans<'_> {
    type Output = io::Result<Vec<Run>>;

    async fn run<E: Env>(self, env: E) -> io::Result<Vec<Run>> {
        let rel = self.rel;
        let o = &rel.o;
        let direct = o.direct || !self.runtime.supports_buffered();
        let on = OnRuntime {
            rel,
            env: &env,
            direct,
        };
        let mut hot: Option<BufferPool> = None;
        let mut memory: Option<Vec<u8>> = None;
        let mut runs = Vec::new();
        for rep in 0..o.repeat {
            for &mode in &o.modes {
                if !mode.runs_on(self.runtime) {
                    continue;
                }
                let resident = match mode {
                    Cache::Cold => rel.make_cold()?,
                    Cache::Warm => rel.make_warm()?,
                    Cache::None | Cache::Hot => rel.resident()?,
                };
                let (pool, ring) = match mode {
                    Cache::Hot => {
                        if hot.is_none() {
                            let frames = usize::try_from(rel.nblocks.max(1)).map_err(|_| {
                                io::Error::other("relation too large for a hot pool")
                            })?;
                            let pool = BufferPool::new(frames, BLCKSZ).map_err(io::Error::from)?;
                            // Fill it with one scan (which checks every page too).
                            on.scan(&pool, None).await?;
                            hot = Some(pool);
                        }
                        (hot.clone().expect("hot pool"), None)
                    }
                    _ => {
                        let pool =
                            BufferPool::new(o.pool_frames, BLCKSZ).map_err(io::Error::from)?;
                        let ring =
                            (rel.nblocks > o.pool_frames as u64 / 4).then_some(RingSize::BULKREAD);
                        (pool, ring)
                    }
                };
                let (counts, seconds, stats) = on.scan(&pool, ring).await?;
                if mode == Cache::Hot && stats.blocks_read != 0 {
                    return Err(io::Error::other(format!(
                        "hot scan read {} blocks: the pool of {} frames did not keep the relation",
                        stats.blocks_read,
                        pool.frames()
                    )));
                }
                let run = Run {
                    runtime: self.runtime.name(),
                    mode,
                    direct,
                    rep,
                    counts,
                    seconds,
                    resident_before: resident,
                    pool_frames: pool.frames(),
                    stats,
                };
                emit(rel, &run);
                runs.push(run);
                if mode == Cache::Hot && o.baseline {
                    if memory.is_none() {
                        memory = Some(rel.read_all()?);
                    }
                    let run = rel.in_memory(memory.as_deref().expect("pages"), rep)?;
                    emit(rel, &run);
                    runs.push(run);
                }
            }
        }
        Ok(runs)
    }
}

struct OnRuntime<'a, E: Env> {
    rel: &'a Relation,
    env: &'a E,
    direct: bool,
}

impl<E: Env> OnRuntime<'_, E> {
    /// Scans every block of the relation through one stream over all its
    /// segments; returns the counts, the seconds and the stream's stats.
    async fn scan(
        &self,
        pool: &BufferPool,
        ring: Option<RingSize>,
    ) -> io::Result<(Counts, f64, StreamStats)> {
        let rel = self.rel;
        let o = &rel.o;
        let opts = FileOptions {
            direct: self.direct,
            block_size: BLCKSZ,
        };
        let mut files = Vec::with_capacity(rel.paths.len());
        for p in &rel.paths {
            files.push(self.env.open(p, opts).await.map_err(|e| named(p, e))?);
        }
        let file = SegmentedFile::new(files, o.segment_bytes)?;
        let mut stream = ReadStream::builder(pool, Segmented::new(self.env.engine()), file)
            .max_ios(o.max_ios)
            .io_combine_limit(o.combine)
            .ring(ring)
            .prefetch(o.prefetch)
            .build(source::forward(0..rel.nblocks))
            .map_err(|e| io::Error::other(format!("{}: cannot scan: {e}", o.path.display())))?;
        let start = Instant::now();
        let mut counts = Counts::default();
        while let Some(page) = stream.next().await {
            let page = page.map_err(|e| named(&o.path, e))?;
            heap::count_page_in(page.block(), &page, o.sum, o.tuple_order, &mut counts)
                .map_err(|e| rel.page_error(e))?;
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok((counts, seconds, stream.close().await))
    }
}

fn sum_text(rel: &Relation, c: &Counts) -> String {
    match (rel.o.sum, c.sum_value()) {
        (false, _) => "-".into(),
        (true, None) => "NULL".into(),
        (true, Some(v)) => v.to_string(),
    }
}

/// Prints a finished run (a table row and its stats, or one JSON line).
fn emit(rel: &Relation, r: &Run) {
    if rel.o.json {
        println!("{}", r.json(rel));
        return;
    }
    let c = &r.counts;
    println!(
        "{:<12} {:<5} {:>3} {:>12} {:>20} {:>10} {:>8.3} {:>9.1} {:>11.0} {:>7} {:>8.2}",
        r.runtime,
        r.mode.name(),
        r.rep,
        c.tuples,
        sum_text(rel, c),
        c.pages,
        r.seconds,
        mib_per_s(c.pages * BLCKSZ as u64, r.seconds),
        c.pages as f64 / r.seconds,
        r.stats.reads,
        r.stats.mean_blocks_per_read()
    );
    println!(
        "    Heap: new pages={} not visible={} redirects={} dead={} unused={} non-null first column={}",
        c.new_pages, c.invisible, c.redirects, c.dead, c.unused, c.non_null
    );
    for line in r.stats.to_string().lines() {
        println!("    {line}");
    }
}

fn run(o: Opts) -> io::Result<()> {
    let rel = Relation::open(o)?;
    let o = &rel.o;
    if !o.json {
        let names: Vec<&str> = o.runtimes.iter().map(|r| r.name()).collect();
        println!(
            "pgcount {}: {} pages in {} segment {}{} ({}), runtimes={} max_ios={} io_combine_limit={}{}",
            o.path.display(),
            rel.nblocks,
            rel.paths.len(),
            if rel.url { "object" } else { "file" },
            if rel.paths.len() == 1 { "" } else { "s" },
            format_size(rel.bytes()),
            names.join(","),
            o.max_ios,
            o.combine,
            if o.direct { " O_DIRECT" } else { "" }
        );
        println!(
            "{:<12} {:<5} {:>3} {:>12} {:>20} {:>10} {:>8} {:>9} {:>11} {:>7} {:>8}",
            "runtime",
            "cache",
            "#",
            "tuples",
            "sum",
            "pages",
            "seconds",
            "MiB/s",
            "pages/s",
            "reads",
            "blk/read"
        );
    }
    let mut runs: Vec<Run> = Vec::new();
    for &rt in &o.runtimes {
        for &mode in &o.modes {
            if !mode.runs_on(rt) {
                eprintln!(
                    "pgcount: {rt} {} skipped: {rt} reads with O_DIRECT only, and warm means \
                     the OS page cache, which O_DIRECT bypasses",
                    mode.name()
                );
            }
        }
        let scans = Scans {
            rel: &rel,
            runtime: rt,
        };
        runs.extend(rt.run_with(&Options::default(), scans)??);
    }
    // Every run read the same relation: the counts must agree.
    let first = &runs[0];
    if let Some(bad) = runs.iter().find(|r| {
        (r.counts.tuples, r.counts.sum_value()) != (first.counts.tuples, first.counts.sum_value())
    }) {
        return Err(io::Error::other(format!(
            "runs disagree: {} run {} counted {} tuples (sum {}), {} run {} counted {} (sum {}) \
             — did the files change during the runs?",
            first.label(),
            first.rep,
            first.counts.tuples,
            sum_text(&rel, &first.counts),
            bad.label(),
            bad.rep,
            bad.counts.tuples,
            sum_text(&rel, &bad.counts)
        )));
    }
    let mut out = String::new();
    {
        use std::fmt::Write as _;
        if o.repeat > 1 {
            let _ = writeln!(
                out,
                "\nsummary over {} run(s) each: median pages/s (min–max), median MiB/s",
                o.repeat
            );
            let mut labels: Vec<String> = Vec::new();
            for r in &runs {
                if !labels.contains(&r.label()) {
                    labels.push(r.label());
                }
            }
            for l in &labels {
                let of = |f: &dyn Fn(&Run) -> f64| {
                    let v: Vec<f64> = runs.iter().filter(|r| &r.label() == l).map(f).collect();
                    Spread::of(&v).expect("runs of this label")
                };
                let p = of(&|r| r.counts.pages as f64 / r.seconds);
                let m = of(&|r| mib_per_s(r.counts.pages * BLCKSZ as u64, r.seconds));
                let _ = writeln!(
                    out,
                    "  {:<18} {:>11.0} pages/s ({:.0}–{:.0})  {:>8.1} MiB/s",
                    l, p.median, p.min, p.max, m.median
                );
            }
        }
        let _ = writeln!(
            out,
            "count(*) = {}, sum(first column as int4) = {}{}",
            first.counts.tuples,
            sum_text(&rel, &first.counts),
            if runs.len() > 1 {
                " (all runs agree)"
            } else {
                ""
            }
        );
    }
    print_summary(o.json, &out);
    Ok(())
}

fn main() {
    args::clap_main("pgcount", USAGE, check, run);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Option<Opts>, UsageError> {
        args::parse_checked(USAGE, v.iter().map(|s| s.to_string()), check)
    }

    #[test]
    fn command_lines() {
        let o = parse(&["rel", "--cache", "hot", "--json", "--segment-size", "64KiB"])
            .unwrap()
            .unwrap();
        assert_eq!(o.path, PathBuf::from("rel"));
        assert_eq!(o.modes, [Cache::Hot]);
        assert_eq!(o.segment_bytes, 64 << 10);
        assert!(o.json && o.sum);
        let o = parse(&["rel"]).unwrap().unwrap();
        assert_eq!(o.modes, [Cache::None]);
        assert_eq!(o.runtimes, [Runtime::ThreadPool]);
        assert_eq!(o.segment_bytes, 1 << 30);
        assert!(parse(&["--help"]).unwrap().is_none());
        // A URL: object-store, the engine's request size and GETs in flight.
        let o = parse(&["s3://bucket/base/5/16384"]).unwrap().unwrap();
        assert_eq!(o.runtimes, [Runtime::ObjectStore]);
        assert_eq!(o.modes, [Cache::None]);
        assert_eq!((o.max_ios, o.combine), (64, 512));
        let o = parse(&["http://h/base/5/1", "--cache", "hot", "--combine", "16"])
            .unwrap()
            .unwrap();
        assert_eq!((o.modes, o.combine, o.max_ios), (vec![Cache::Hot], 16, 64));
        assert_eq!(parse(&["rel"]).unwrap().unwrap().max_ios, 16);
        for (bad, needle) in [
            (&[][..], "no PATH"),
            (&["a", "b"], "unexpected argument"),
            (&["a", "--segment-size", "1000"], "multiple of 8KiB"),
            (&["a", "--cache", "tepid"], "tepid"),
            (&["a", "--combine", "0"], "--combine"),
            (&["a", "--repeat", "0"], "--repeat"),
            (&["a", "--direct", "--cache", "warm"], "bypasses"),
            (
                &["a", "--runtime", "glommio", "--cache", "warm"],
                "nothing to run",
            ),
            (
                &["s3://b/k", "--runtime", "uring"],
                "not the object URL s3://b/k",
            ),
            (
                &["s3://b/k", "--cache", "cold"],
                "--cache cold does not apply",
            ),
            (&["a", "--runtime", "object-store"], "not the local file a"),
        ] {
            let e = parse(bad).err().unwrap_or_else(|| panic!("{bad:?}"));
            assert!(e.0.contains(needle), "{bad:?}: {e}");
        }
    }
}
