//! `prewarm`: loads a whole file into a buffer pool as fast as possible, as
//! PostgreSQL's `pg_prewarm` does, with a stream built with `full(true)`
//! (PostgreSQL's `READ_STREAM_FULL`): the caller will read every block, so
//! the stream starts at full-sized reads and full look-ahead instead of
//! ramping the distance up from 1.
//!
//! ```text
//! cargo run --release --bin prewarm -- [--file PATH] [--cache none|cold|warm] [--full on|off] [--json] …
//! ```
//!
//! The default file is the one `seqscan` creates
//! (`target/pagestream-data/seqscan-1GiB.dat`, created if absent). The pool
//! holds the whole file; after the load every block must be valid in it.
//!
//! `--file` may name an object (`s3://bucket/key`, `http(s)://host/path`):
//! it is loaded from the server by the `object-store` runtime
//! ([`pagestream_bench::object`]); `--cache` is then `none` (the OS page
//! cache states `cold` and `warm` do not apply), `--direct` and `--create`
//! are errors.

use clap::ArgAction;
use futures::StreamExt;
use pagestream::{source, BufferPool, ReadStream, StreamStats};
use pagestream_bench::args::{
    self, at_least_one, check_block_size, check_combine, check_max_ios, format_size, number,
    parse_block_size, parse_on_off, parse_runtimes, List, UsageError,
};
use pagestream_bench::cache::{self, Cache};
use pagestream_bench::data::FileArgs;
use pagestream_bench::object::{self, combine_for, max_ios_for, not_for_url, NO_DIRECT};
use pagestream_bench::timing::{mib_per_s, print_summary, JsonObject, Spread};
use pagestream_runtimes::{Env, FileOptions, Options, Runtime, Workload};
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::time::Instant;

const USAGE: &str = "\
usage: prewarm [options]

Loads a whole file into a buffer pool that holds it, through a pagestream
ReadStream built with full(true) (PostgreSQL's READ_STREAM_FULL: no distance
ramp), and prints the time and MiB/s.

options:
  --file PATH|URL     file to load (default: seqscan's data file,
                      target/pagestream-data/seqscan-<size>.dat, created if
                      absent), or an object: s3://bucket/key (endpoint and
                      credentials from AWS_ENDPOINT, AWS_ACCESS_KEY_ID,
                      AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP) or
                      http(s)://host/path, loaded by the object-store
                      runtime (--cache none only; --direct, --create and
                      other runtimes are errors)
  --create            with --file: create PATH (stamped, --size bytes) if it
                      does not exist; without it a missing PATH is an error
  --size SIZE         size of a data file to create (default 1GiB)
  --runtime NAME      threadpool | tokio-uring | glommio | uring | uring-tokio
                      | all, or a
                      comma-separated list (default threadpool; object-store
                      for a URL); glommio reads with O_DIRECT only
  --cache MODE        none | cold | warm: the OS page cache before each load
                      (default cold: evicted; warm: read first; none: as is;
                      a URL: none)
  --direct            open the file with O_DIRECT
  --full on|off       skip the distance ramp (default on; off to compare)
  --max-ios N         reads in flight at most (default 16; 64 for a URL)
  --combine N         io_combine_limit, blocks per read (default 16; 4MiB of
                      blocks for a URL)
  --block-size SIZE   block size (default 8KiB)
  --repeat N          loads (each into a fresh pool; default 1)
  --json              one JSON object per load on stdout
  --help              this text";

#[derive(Debug, clap::Parser)]
struct Opts {
    #[command(flatten)]
    data: FileArgs,
    /// `--runtime` as given (`None`: threadpool, or object-store for a URL).
    #[arg(long = "runtime", value_parser = parse_runtimes)]
    runtime: Option<List<Runtime>>,
    /// The runtimes to run (set by `check`).
    #[arg(skip)]
    runtimes: List<Runtime>,
    /// `--cache` as given (`None`: cold, or none for a URL).
    #[arg(long = "cache", value_parser = |s: &str| {
        Cache::parse(s, &[Cache::None, Cache::Cold, Cache::Warm], None).map(|v| v[0])
    })]
    cache: Option<Cache>,
    /// The cache state before each load (set by `check`).
    #[arg(skip = Cache::Cold)]
    mode: Cache,
    #[arg(long)]
    direct: bool,
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    full: bool,
    /// `--max-ios` as given (`None`: the default for the file).
    #[arg(long = "max-ios", value_parser = number::<usize>)]
    max_ios_given: Option<usize>,
    /// Reads in flight (set by `check`).
    #[arg(skip)]
    max_ios: usize,
    /// `--combine` as given (`None`: the default for the file).
    #[arg(long = "combine", value_parser = number::<usize>)]
    combine_given: Option<usize>,
    /// `io_combine_limit` (set by `check`).
    #[arg(skip)]
    combine: usize,
    #[arg(long, default_value = "8KiB", value_parser = parse_block_size)]
    block_size: usize,
    #[arg(long, default_value = "1", value_parser = number::<usize>)]
    repeat: usize,
    #[arg(long)]
    json: bool,
}

/// The checks across flags; sets `runtimes`, `mode`, `max_ios` and
/// `combine`.
fn check(mut o: Opts) -> Result<Opts, UsageError> {
    o.data.check()?;
    let url = o.data.url().map(str::to_owned);
    o.runtimes = object::runtimes_for(
        o.data.file.as_deref(),
        o.runtime.take(),
        &[Runtime::ThreadPool],
    )?;
    at_least_one("repeat", o.repeat)?;
    check_block_size(o.block_size, o.data.size)?;
    o.combine = combine_for(url.is_some(), o.combine_given, o.block_size);
    o.max_ios = max_ios_for(url.is_some(), o.max_ios_given);
    check_combine(o.combine)?;
    check_max_ios(o.max_ios)?;
    if let Some(url) = &url {
        if o.direct {
            return Err(not_for_url("--direct", url, NO_DIRECT));
        }
        o.mode = object::url_modes(url, o.cache.map(|c| vec![c]), &[Cache::None])?[0];
        return Ok(o);
    }
    o.mode = o.cache.unwrap_or(Cache::Cold);
    let direct_only = o.direct || o.runtimes.iter().all(|rt| !rt.supports_buffered());
    if o.mode == Cache::Warm && direct_only {
        return Err(UsageError(
            "--cache warm means the OS page cache, which O_DIRECT reads bypass".into(),
        ));
    }
    Ok(o)
}

/// One load.
struct Load {
    runtime: &'static str,
    direct: bool,
    rep: usize,
    pages: u64,
    seconds: f64,
    resident_before: f64,
    pool_valid: usize,
    stats: StreamStats,
}

struct Shared {
    o: Opts,
    path: PathBuf,
    nblocks: u64,
    /// A buffered handle for cache control (`None` for an object URL).
    plain: Option<File>,
}

impl Shared {
    fn bytes(&self, pages: u64) -> u64 {
        pages * self.o.block_size as u64
    }

    fn json(&self, l: &Load) -> JsonObject {
        let o = &self.o;
        let s = &l.stats;
        let mut j = JsonObject::default();
        j.set("runtime", l.runtime)
            .set("cache", o.mode.name())
            .set("full", o.full)
            .set("direct", l.direct)
            .set("pages", l.pages)
            .set("bytes", self.bytes(l.pages))
            .set("seconds", l.seconds)
            .set("mib_per_s", mib_per_s(self.bytes(l.pages), l.seconds))
            .set("pages_per_s", l.pages as f64 / l.seconds)
            .set("reads", s.reads)
            .set("mean_blocks_per_read", s.mean_blocks_per_read())
            .set("max_blocks_per_read", s.max_blocks_per_read)
            .set("max_in_flight", s.max_in_flight)
            .set("max_distance", s.max_distance)
            .set("mean_distance", s.mean_distance())
            .set("mean_pinned", s.mean_pinned())
            .set("waits", s.waits)
            .set("wait_seconds", s.wait_time.as_secs_f64())
            .set("blocks_read", s.blocks_read)
            .set("hits", s.hits)
            .set("pool_frames", self.nblocks)
            .set("pool_valid", l.pool_valid)
            .set("resident_before", l.resident_before)
            .set("run", l.rep)
            .set("file", self.path.display().to_string())
            .set("block_size", o.block_size)
            .set("max_ios", o.max_ios)
            .set("io_combine_limit", o.combine);
        j
    }

    fn emit(&self, l: &Load) {
        if self.o.json {
            println!("{}", self.json(l).to_line());
            return;
        }
        println!(
            "{:<12} {:>3} {:>8.3} {:>9.1} {:>11.0} {:>7} {:>8.2} {:>8} {:>8.3}",
            l.runtime,
            l.rep,
            l.seconds,
            mib_per_s(self.bytes(l.pages), l.seconds),
            l.pages as f64 / l.seconds,
            l.stats.reads,
            l.stats.mean_blocks_per_read(),
            l.stats.max_in_flight,
            l.resident_before
        );
        for line in l.stats.to_string().lines() {
            println!("    {line}");
        }
    }
}

struct Loads<'a> {
    sh: &'a Shared,
    runtime: Runtime,
}

impl Workload for Loads<'_> {
    type Output = io::Result<Vec<Load>>;

    async fn run<E: Env>(self, env: E) -> io::Result<Vec<Load>> {
        let sh = self.sh;
        let o = &sh.o;
        let direct = o.direct || !self.runtime.supports_buffered();
        let frames = usize::try_from(sh.nblocks)
            .map_err(|_| io::Error::other("file too large for a pool"))?;
        let mut loads = Vec::new();
        for rep in 0..o.repeat {
            let resident = match (o.mode, &sh.plain) {
                // An object: no page cache (`check` allows none only).
                (_, None) => 0.0,
                (Cache::Cold, Some(f)) => cache::make_cold(f, &sh.path)?,
                (Cache::Warm, Some(f)) => {
                    cache::warm(f)?;
                    cache::resident_fraction(f)?
                }
                (Cache::None, Some(f)) => cache::resident_fraction(f)?,
                // --cache accepts none, cold and warm only.
                (Cache::Hot, Some(_)) => unreachable!("prewarm has no cache state hot"),
            };
            let pool = BufferPool::new(frames, o.block_size).map_err(io::Error::from)?;
            let file = env
                .open(
                    &sh.path,
                    FileOptions {
                        direct,
                        block_size: o.block_size,
                    },
                )
                .await?;
            let mut stream = ReadStream::builder(&pool, env.engine(), file)
                .max_ios(o.max_ios)
                .io_combine_limit(o.combine)
                .full(o.full)
                .build(source::forward(0..sh.nblocks))
                .map_err(io::Error::from)?;
            let start = Instant::now();
            let mut pages = 0u64;
            while let Some(page) = stream.next().await {
                // Dropping the guard unpins the page; it stays in the pool.
                page?;
                pages += 1;
            }
            let seconds = start.elapsed().as_secs_f64();
            let stats = stream.close().await;
            let pool_valid = pool.stats().valid;
            if pool_valid as u64 != sh.nblocks {
                return Err(io::Error::other(format!(
                    "after the load the pool holds {pool_valid} of {} blocks",
                    sh.nblocks
                )));
            }
            let load = Load {
                runtime: self.runtime.name(),
                direct,
                rep,
                pages,
                seconds,
                resident_before: resident,
                pool_valid,
                stats,
            };
            sh.emit(&load);
            loads.push(load);
        }
        Ok(loads)
    }
}

fn run(o: Opts) -> io::Result<()> {
    let (path, nblocks) = o.data.scan_file("prewarm", o.block_size)?;
    let plain = match o.data.url() {
        Some(_) => None,
        None => Some(File::open(&path)?),
    };
    let sh = Shared {
        o,
        path,
        nblocks,
        plain,
    };
    let o = &sh.o;
    if !o.json {
        println!(
            "prewarm {}: {} blocks of {} ({}) into a pool of {} frames, cache={} full={} \
             max_ios={} io_combine_limit={}{}",
            sh.path.display(),
            nblocks,
            o.block_size,
            format_size(sh.bytes(nblocks)),
            nblocks,
            o.mode.name(),
            if o.full { "on" } else { "off" },
            o.max_ios,
            o.combine,
            if o.direct { " O_DIRECT" } else { "" }
        );
        println!(
            "{:<12} {:>3} {:>8} {:>9} {:>11} {:>7} {:>8} {:>8} {:>8}",
            "runtime",
            "#",
            "seconds",
            "MiB/s",
            "pages/s",
            "reads",
            "blk/read",
            "inflight",
            "resident"
        );
    }
    let mut loads = Vec::new();
    for &rt in &o.runtimes {
        if o.mode == Cache::Warm && !rt.supports_buffered() {
            eprintln!("prewarm: {rt} skipped: it reads with O_DIRECT only, and warm means the OS page cache");
            continue;
        }
        loads.extend(rt.run_with(
            &Options::default(),
            Loads {
                sh: &sh,
                runtime: rt,
            },
        )??);
    }
    let mut out = String::new();
    {
        use std::fmt::Write as _;
        for rt in &o.runtimes {
            let v: Vec<f64> = loads
                .iter()
                .filter(|l| l.runtime == rt.name())
                .map(|l| mib_per_s(sh.bytes(l.pages), l.seconds))
                .collect();
            if let Some(s) = Spread::of(&v) {
                let _ = writeln!(
                    out,
                    "{rt}: {} loaded, median {:.1} MiB/s ({:.1}–{:.1}) over {} load(s)",
                    format_size(sh.bytes(nblocks)),
                    s.median,
                    s.min,
                    s.max,
                    s.n
                );
            }
        }
    }
    print_summary(o.json, &out);
    Ok(())
}

fn main() {
    args::clap_main("prewarm", USAGE, check, run);
}
