//! The command line: `scan`, `report` and `soak`.

use crate::args::{
    self, check_block_size, number, parse_block_size, parse_on_off, parse_yield_budget, List,
    UsageError,
};
use crate::data::FileArgs;
use crate::object::{combine_for, max_ios_for, not_for_url, NO_CREATE};
use crate::pattern::Pattern;
use crate::scan::{check, Cache, Engine, ScanConfig};
use clap::ArgAction;
use std::path::PathBuf;

/// Usage text.
pub const USAGE: &str = "\
usage: pagestream-bench scan --engine E --pattern P --cache C [options]
       pagestream-bench report [--quick] [--out DIR] [--repeat N] [--only 1,2,..|tokio]
                               [--doc PATH] [--readme PATH]
       pagestream-bench soak [--runtime LIST] [--duration D] [--streams N] [options]

scan: one configuration, --repeat times.
  --engine E         threadpool | tokio-uring | glommio | uring | uring-tokio
                     | uring-tokio-blockon | threadpool-tokio    (pagestream)
                     pread-loop | fadvise-prefetch | tokio-fs | glommio-stream
                     | tokio-io-uring | tokio-uring-fs | bare-uring-tokio
                     | fio    (baselines)
                     (uring-tokio, threadpool-tokio: the scan in a task
                     spawned on a multi-thread tokio runtime;
                     uring-tokio-blockon: in its block_on; tokio-io-uring:
                     tokio's own io_uring fs, a separately built program;
                     bare-uring-tokio: one task, a ring, awaiting it in
                     tokio's reactor: the floor under uring-tokio)
                     object-store (pagestream over an object URL; the
                     default, and the only engine, for --file URL)
  --pattern P        forward | backward | random | bitmap:DENSITY
                     (random: every block once, seeded order; bitmap: that
                     fraction of blocks, seeded, ascending)
  --cache C          cold | warm | hot | none (hot: pagestream's pool holds
                     the blocks; baselines have no pool: the OS page cache;
                     none: the file as it is). For a URL none (the default:
                     every block from the server) or hot: cold and warm are
                     OS page cache states, which an object is not read
                     through
  --direct           O_DIRECT (glommio engines always; not for a URL)
  --readahead on|off kernel read-ahead; off = POSIX_FADV_RANDOM (default on;
                     not off for a URL)
  --file PATH|URL    data file (default target/pagestream-data/seqscan-<size>.dat,
                     created stamped if absent), or an object: s3://bucket/key
                     (endpoint and credentials from AWS_ENDPOINT,
                     AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
                     AWS_ALLOW_HTTP) or http(s)://host/path
  --create           with --file: create PATH (stamped, --size bytes) if it
                     does not exist; without it a missing PATH is an error
  --size SIZE        size of a file to create (default 1GiB)
  --block-size SIZE  default 8192
  --combine N        io_combine_limit (default 16, object-store 4MiB of
                     blocks; fio forward: bs = N blocks)
  --max-ios N        reads in flight (default 16, object-store 64; fio
                     iodepth, prefetch hints, glommio read-ahead)
  --pool-frames N    pagestream pool for cold/warm runs (default 16384)
  --no-backward-combining
  --full             pagestream: start at full look-ahead distance (no ramp;
                     PostgreSQL's READ_STREAM_FULL)
  --nowait on|off    threadpool, uring, uring-tokio: inline RWF_NOWAIT read
                     first on buffered files (default on)
  --workers N        tokio worker threads of uring-tokio, uring-tokio-blockon,
                     threadpool-tokio, tokio-io-uring and bare-uring-tokio
                     (default 2)
  --fixed-buffers    uring, uring-tokio: register the pool as io_uring fixed
                     buffers (reads into it become READ_FIXED)
  --yield-budget B   pagestream: the stream's yield budget: auto (default;
                     200us, 1ms on tokio's multi-thread runtime), off, a
                     time (200us, 1ms) or a count of items
  --gap-limit N      pagestream: read through holes of up to N unwanted
                     blocks between wanted ones (default 0: off)
  --seed N           seed of random and bitmap (default 1)
  --repeat N         runs (default 1)
  --json             one JSON object per run on stdout, no progress bars

report: the standard matrix (see README), engines alternating run by run;
  writes target/bench-report/report.md, report.json and SVG charts.
  --quick            reduced matrix, small files, 3 repeats (< 2 minutes)
  --out DIR          output directory (default target/bench-report)
  --repeat N         repeats (default 5; --quick 3)
  --only LIST        comma-separated sections to run: 1,2,3,4,5,6,7 (default
                     all; 6: object storage, on nginx and moto started on
                     loopback; 7 or tokio: io_uring from tokio). A partial
                     run writes docs/benchmarks.md and the README only when
                     --doc / --readme say so
  --doc PATH         also write the report as documentation: PATH (charts in
                     PATH's stem beside it); default docs/benchmarks.md when
                     run from the workspace root, else not written
  --readme PATH      rewrite PATH's block between <!-- headline:begin --> and
                     <!-- headline:end --> with the headline table (default
                     README.md when run from the workspace root)

soak: many streams on a small pool over a stamped file, on each runtime in
  turn, with random drops, resets, timeouts, closes and guards kept past
  their stream; every page verified, RSS and open file descriptors sampled.
  Fails on a wrong or lost page, an error other than pool exhaustion, a
  hang, a file descriptor left open, or RSS growing (runs of 1m or more).
  --runtime LIST     threadpool, tokio-uring, glommio, uring, uring-tokio,
                     object-store (from nginx on loopback), comma-separated,
                     or all (the five local ones; default)
  --duration D       per runtime: 500ms, 30s, 10m, 1h (default 30s)
  --streams N        concurrent streams (default 64)
  --pool-frames N    the pool they share (default 256)
  --size SIZE        the data file, created and removed (default 64MiB)
  --block-size SIZE  default 8192
  --seed N           default 1
  --json             one JSON object per runtime";

/// `scan`'s options.
#[derive(Debug, Clone)]
pub struct ScanOpts {
    /// The configuration.
    pub cfg: ScanConfig,
    /// `--file`.
    pub file: Option<PathBuf>,
    /// `--create`: a missing `--file` is created.
    pub create: bool,
    /// `--size`.
    pub size: u64,
    /// `--repeat`.
    pub repeat: usize,
    /// `--json`.
    pub json: bool,
}

/// `report`'s options.
#[derive(Debug, Clone)]
pub struct ReportOpts {
    /// `--quick`.
    pub quick: bool,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// `--repeat`.
    pub repeat: Option<usize>,
    /// `--only`: sections 1–7 (all by default).
    pub only: Vec<u8>,
    /// Whether `--only` left sections out (the documentation page is then
    /// written only where `--doc` names it).
    pub partial: bool,
    /// `--doc`: the documentation page to write.
    pub doc: Option<PathBuf>,
    /// `--readme`: the README whose headline block to rewrite.
    pub readme: Option<PathBuf>,
}

/// A parsed command.
#[derive(Debug, Clone)]
pub enum Command {
    /// `scan`.
    Scan(ScanOpts),
    /// `report`.
    Report(ReportOpts),
    /// `soak`.
    Soak(crate::soak::SoakOpts),
}

/// Parses a command line (without the program name); `Ok(None)` asks for
/// the usage text. The command is the first word; its options are read
/// with clap ([`args::parse`]).
pub fn parse(items: Vec<String>) -> Result<Option<Command>, UsageError> {
    let mut items = items.into_iter();
    let Some(sub) = items.next() else {
        return Err(UsageError(
            "expected a command: scan, report or soak".into(),
        ));
    };
    match sub.as_str() {
        "scan" => args::parse_checked(USAGE, items, ScanArgs::check).map(|o| o.map(Command::Scan)),
        "report" => {
            args::parse_checked(USAGE, items, ReportArgs::check).map(|o| o.map(Command::Report))
        }
        "soak" => args::parse_checked(USAGE, items, SoakArgs::check).map(|o| o.map(Command::Soak)),
        "help" | "-h" | "--help" => Ok(None),
        flag if flag.starts_with('-') => Err(UsageError(format!(
            "expected a command (scan, report or soak) before {flag}"
        ))),
        other => Err(UsageError(format!(
            "unknown command {other:?}: expected scan, report or soak"
        ))),
    }
}

/// `scan`'s command line.
#[derive(Debug, clap::Parser)]
struct ScanArgs {
    #[arg(long, value_parser = |s: &str| s.parse::<Engine>())]
    engine: Option<Engine>,
    #[arg(long, value_parser = |s: &str| s.parse::<Pattern>())]
    pattern: Option<Pattern>,
    #[arg(long, value_parser = |s: &str| {
        let four = [Cache::Cold, Cache::Warm, Cache::Hot, Cache::None];
        Cache::parse(s, &four, None).map(|v| v[0])
    })]
    cache: Option<Cache>,
    #[arg(long)]
    direct: bool,
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    readahead: bool,
    #[command(flatten)]
    data: FileArgs,
    #[arg(long, default_value = "8192", value_parser = parse_block_size)]
    block_size: usize,
    /// `None`: the engine's default.
    #[arg(long, value_parser = number::<usize>)]
    combine: Option<usize>,
    /// `None`: the engine's default.
    #[arg(long, value_parser = number::<usize>)]
    max_ios: Option<usize>,
    #[arg(long, default_value = "16384", value_parser = number::<usize>)]
    pool_frames: usize,
    #[arg(long = "no-backward-combining", action = ArgAction::SetFalse)]
    backward_combining: bool,
    #[arg(long)]
    full: bool,
    #[arg(long, default_value = "on", value_parser = parse_on_off, action = ArgAction::Set)]
    nowait: bool,
    #[arg(long, default_value_t = pagestream_runtimes::TOKIO_WORKERS, value_parser = number::<usize>)]
    workers: usize,
    #[arg(long = "fixed-buffers")]
    fixed_buffers: bool,
    #[arg(long = "yield-budget", default_value = "auto", value_parser = parse_yield_budget)]
    yield_budget: pagestream::YieldBudget,
    #[arg(long = "gap-limit", default_value = "0", value_parser = number::<usize>)]
    gap_limit: usize,
    #[arg(long, default_value = "1", value_parser = number::<u64>)]
    seed: u64,
    #[arg(long, default_value = "1", value_parser = number::<usize>)]
    repeat: usize,
    #[arg(long)]
    json: bool,
}

impl ScanArgs {
    /// The checks across flags.
    fn check(a: ScanArgs) -> Result<ScanOpts, UsageError> {
        let missing = |f: &str| UsageError(format!("{f} is required"));
        let url = a.data.url().map(str::to_owned);
        // A URL is read by object-store, and only by it.
        let engine = match (&url, a.engine) {
            (Some(_), None | Some(Engine::ObjectStore)) => Engine::ObjectStore,
            (Some(url), Some(e)) => {
                return Err(UsageError(format!(
                    "--engine {e} reads local files, not the object URL {url}: a URL is read by \
                     the object-store engine (leave --engine out, or say --engine object-store)"
                )))
            }
            (None, Some(Engine::ObjectStore)) => {
                return Err(UsageError(
                    "--engine object-store reads object URLs (s3://bucket/key, \
                     http(s)://host/path): name one with --file"
                        .into(),
                ))
            }
            (None, Some(e)) => e,
            (None, None) => return Err(missing("--engine")),
        };
        if let Some(url) = &url {
            if a.data.create {
                return Err(not_for_url("--create", url, NO_CREATE));
            }
        }
        let cache = match (&url, a.cache) {
            (_, Some(c)) => c,
            (Some(_), None) => Cache::None,
            (None, None) => return Err(missing("--cache")),
        };
        let object = engine == Engine::ObjectStore;
        let mut o = ScanOpts {
            cfg: ScanConfig {
                engine,
                pattern: a.pattern.ok_or_else(|| missing("--pattern"))?,
                cache,
                direct: a.direct,
                readahead: a.readahead,
                block_size: a.block_size,
                combine: combine_for(object, a.combine, a.block_size),
                max_ios: max_ios_for(object, a.max_ios),
                pool_frames: a.pool_frames,
                backward_combining: a.backward_combining,
                seed: a.seed,
                full: a.full,
                nowait: a.nowait,
                workers: a.workers,
                fixed_buffers: a.fixed_buffers,
                yield_budget: a.yield_budget,
                gap_limit: a.gap_limit,
            },
            file: a.data.file,
            create: a.data.create,
            size: a.data.size,
            repeat: a.repeat,
            json: a.json,
        };
        if o.repeat == 0 {
            return Err(UsageError("--repeat must be at least 1".into()));
        }
        check_block_size(o.cfg.block_size, o.size)?;
        if o.cfg.engine.direct_only() {
            o.cfg.direct = true;
        }
        check(&o.cfg).map_err(UsageError)?;
        Ok(o)
    }
}

/// `report`'s command line.
#[derive(Debug, clap::Parser)]
struct ReportArgs {
    #[arg(long)]
    quick: bool,
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long, value_parser = number::<usize>)]
    repeat: Option<usize>,
    /// `None`: every section.
    #[arg(long, value_parser = |s: &str| {
        s.split(',')
            .map(|p| match (p.trim(), p.trim().parse::<u8>()) {
                ("tokio", _) => Ok(7),
                (_, Ok(n @ 1..=7)) => Ok(n),
                _ => Err(format!("{p:?}: expected section numbers 1 to 7 (or tokio)")),
            })
            .collect::<Result<List<u8>, String>>()
    })]
    only: Option<List<u8>>,
    #[arg(long)]
    doc: Option<PathBuf>,
    #[arg(long)]
    readme: Option<PathBuf>,
}

impl ReportArgs {
    /// The checks across flags.
    fn check(a: ReportArgs) -> Result<ReportOpts, UsageError> {
        if a.repeat == Some(0) {
            return Err(UsageError("--repeat must be at least 1".into()));
        }
        let all: Vec<u8> = (1..=7).collect();
        let only: Vec<u8> = a.only.unwrap_or_else(|| all.clone());
        Ok(ReportOpts {
            quick: a.quick,
            out: a.out,
            repeat: a.repeat,
            partial: all.iter().any(|n| !only.contains(n)),
            only,
            doc: a.doc,
            readme: a.readme,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(args: &[&str]) -> ReportOpts {
        let mut v = vec!["report".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        match parse(v) {
            Ok(Some(Command::Report(o))) => o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn only_takes_numbers_and_tokio_and_marks_a_partial_run() {
        let all = report(&[]);
        assert_eq!(all.only, [1, 2, 3, 4, 5, 6, 7]);
        assert!(!all.partial);
        let t = report(&["--only", "tokio"]);
        assert_eq!(t.only, [7]);
        assert!(t.partial);
        assert_eq!(report(&["--only", "1,7"]).only, [1, 7]);
        assert!(!report(&["--only", "1,2,3,4,5,6,7"]).partial);
    }
}

/// `soak`'s command line.
#[derive(Debug, clap::Parser)]
struct SoakArgs {
    #[arg(long, default_value = "all", value_parser = args::parse_runtimes)]
    runtime: List<pagestream_runtimes::Runtime>,
    #[arg(long, default_value = "30s", value_parser = args::parse_duration)]
    duration: std::time::Duration,
    #[arg(long, default_value = "64", value_parser = number::<usize>)]
    streams: usize,
    #[arg(long = "pool-frames", default_value = "256", value_parser = number::<usize>)]
    pool_frames: usize,
    #[arg(long, default_value = "64MiB", value_parser = args::parse_size)]
    size: u64,
    #[arg(long = "block-size", default_value = "8192", value_parser = parse_block_size)]
    block_size: usize,
    #[arg(long, default_value = "1", value_parser = number::<u64>)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

impl SoakArgs {
    /// The checks across flags.
    fn check(a: SoakArgs) -> Result<crate::soak::SoakOpts, UsageError> {
        let o = crate::soak::SoakOpts {
            runtimes: a.runtime,
            duration: a.duration,
            streams: a.streams,
            frames: a.pool_frames,
            size: a.size,
            block_size: a.block_size,
            seed: a.seed,
            json: a.json,
        };
        crate::soak::check(&o)?;
        Ok(o)
    }
}
