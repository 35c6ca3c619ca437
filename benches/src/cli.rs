//! The command line: `scan` and `report`.

use crate::pattern::Pattern;
use crate::scan::{check, Cache, Engine, ScanConfig};
use pagestream_examples::args::{check_block_size, parse_block_size, parse_on_off, parse_size};
use pagestream_examples::args::{Arg, Args, UsageError};
use std::path::PathBuf;

/// Usage text.
pub const USAGE: &str = "\
usage: pagestream-bench scan --engine E --pattern P --cache C [options]
       pagestream-bench report [--quick] [--out DIR] [--repeat N] [--only 1,2,..]
                               [--doc PATH] [--readme PATH]

scan: one configuration, --repeat times.
  --engine E         threadpool | tokio-uring | glommio | uring    (pagestream)
                     pread-loop | fadvise-prefetch | tokio-fs | glommio-stream | fio
  --pattern P        forward | backward | random | bitmap:DENSITY
                     (random: every block once, seeded order; bitmap: that
                     fraction of blocks, seeded, ascending)
  --cache C          cold | warm | hot (hot: pagestream's pool holds the
                     blocks; baselines have no pool: the OS page cache)
  --direct           O_DIRECT (glommio engines always)
  --readahead on|off kernel read-ahead; off = POSIX_FADV_RANDOM (default on)
  --file PATH        data file (default target/pagestream-data/seqscan-<size>.dat,
                     created stamped if absent)
  --create           with --file: create PATH (stamped, --size bytes) if it
                     does not exist; without it a missing PATH is an error
  --size SIZE        size of a file to create (default 1GiB)
  --block-size SIZE  default 8192
  --combine N        io_combine_limit (default 16; fio forward: bs = N blocks)
  --max-ios N        reads in flight (default 16; fio iodepth, prefetch hints,
                     glommio read-ahead)
  --pool-frames N    pagestream pool for cold/warm runs (default 16384)
  --no-backward-combining
  --full             pagestream: start at full look-ahead distance (no ramp;
                     PostgreSQL's READ_STREAM_FULL)
  --nowait on|off    threadpool: inline RWF_NOWAIT read first on buffered
                     files (default on)
  --seed N           seed of random and bitmap (default 1)
  --repeat N         runs (default 1)
  --json             one JSON object per run on stdout, no progress bars

report: the standard matrix (see README), engines alternating run by run;
  writes target/bench-report/report.md, report.json and SVG charts.
  --quick            reduced matrix, small files, 3 repeats (< 2 minutes)
  --out DIR          output directory (default target/bench-report)
  --repeat N         repeats (default 5; --quick 3)
  --only LIST        comma-separated sections to run: 1,2,3,4,5 (default all)
  --doc PATH         also write the report as documentation: PATH (charts in
                     PATH's stem beside it); default docs/benchmarks.md when
                     run from the workspace root, else not written
  --readme PATH      rewrite PATH's block between <!-- headline:begin --> and
                     <!-- headline:end --> with the headline table (default
                     README.md when run from the workspace root)";

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
    /// `--only`: sections 1–5.
    pub only: Vec<u8>,
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
}

/// Parses a command line (without the program name); `Ok(None)` asks for
/// the usage text.
pub fn parse(mut args: Args) -> Result<Option<Command>, UsageError> {
    let sub = match args.next_arg()? {
        None => return Err(UsageError("expected a command: scan or report".into())),
        Some(Arg::Flag(f)) if f == "help" => return Ok(None),
        Some(Arg::Positional(p)) => p,
        Some(a) => {
            return Err(UsageError(format!(
                "expected a command (scan or report) before {}",
                match a {
                    Arg::Flag(f) => format!("--{f}"),
                    Arg::Positional(p) => p,
                }
            )))
        }
    };
    match sub.as_str() {
        "scan" => parse_scan(args).map(|o| o.map(Command::Scan)),
        "report" => parse_report(args).map(|o| o.map(Command::Report)),
        "help" => Ok(None),
        other => Err(UsageError(format!(
            "unknown command {other:?}: expected scan or report"
        ))),
    }
}

fn parse_scan(mut args: Args) -> Result<Option<ScanOpts>, UsageError> {
    let mut engine = None;
    let mut pattern = None;
    let mut cache = None;
    let mut o = ScanOpts {
        cfg: ScanConfig {
            engine: Engine::ThreadPool,
            pattern: Pattern::Forward,
            cache: Cache::Cold,
            direct: false,
            readahead: true,
            block_size: 8192,
            combine: 16,
            max_ios: 16,
            pool_frames: 16384,
            backward_combining: true,
            seed: 1,
            full: false,
            nowait: true,
        },
        file: None,
        create: false,
        size: 1 << 30,
        repeat: 1,
        json: false,
    };
    while let Some(arg) = args.next_arg()? {
        let Arg::Flag(name) = &arg else {
            return Err(args.unknown(&arg));
        };
        let c = &mut o.cfg;
        match name.as_str() {
            "help" => return Ok(None),
            "engine" => engine = Some(args.parsed(|s| s.parse::<Engine>())?),
            "pattern" => pattern = Some(args.parsed(|s| s.parse::<Pattern>())?),
            "cache" => cache = Some(args.parsed(|s| s.parse::<Cache>())?),
            "direct" => c.direct = true,
            "readahead" => c.readahead = args.parsed(parse_on_off)?,
            "file" => o.file = Some(PathBuf::from(args.value()?)),
            "create" => o.create = true,
            "size" => o.size = args.parsed(parse_size)?,
            "block-size" => c.block_size = args.parsed(parse_block_size)?,
            "combine" => c.combine = args.number()?,
            "max-ios" => c.max_ios = args.number()?,
            "pool-frames" => c.pool_frames = args.number()?,
            "no-backward-combining" => c.backward_combining = false,
            "full" => c.full = true,
            "nowait" => c.nowait = args.parsed(parse_on_off)?,
            "seed" => c.seed = args.number()?,
            "repeat" => o.repeat = args.number()?,
            "json" => o.json = true,
            _ => return Err(args.unknown(&arg)),
        }
    }
    let missing = |f: &str| UsageError(format!("{f} is required"));
    o.cfg.engine = engine.ok_or_else(|| missing("--engine"))?;
    o.cfg.pattern = pattern.ok_or_else(|| missing("--pattern"))?;
    o.cfg.cache = cache.ok_or_else(|| missing("--cache"))?;
    if o.repeat == 0 {
        return Err(UsageError("--repeat must be at least 1".into()));
    }
    check_block_size(o.cfg.block_size, o.size)?;
    if o.cfg.engine.direct_only() {
        o.cfg.direct = true;
    }
    check(&o.cfg).map_err(UsageError)?;
    Ok(Some(o))
}

fn parse_report(mut args: Args) -> Result<Option<ReportOpts>, UsageError> {
    let mut o = ReportOpts {
        quick: false,
        out: None,
        repeat: None,
        only: vec![1, 2, 3, 4, 5],
        doc: None,
        readme: None,
    };
    while let Some(arg) = args.next_arg()? {
        let Arg::Flag(name) = &arg else {
            return Err(args.unknown(&arg));
        };
        match name.as_str() {
            "help" => return Ok(None),
            "quick" => o.quick = true,
            "out" => o.out = Some(PathBuf::from(args.value()?)),
            "doc" => o.doc = Some(PathBuf::from(args.value()?)),
            "readme" => o.readme = Some(PathBuf::from(args.value()?)),
            "repeat" => {
                let n: usize = args.number()?;
                if n == 0 {
                    return Err(UsageError("--repeat must be at least 1".into()));
                }
                o.repeat = Some(n);
            }
            "only" => {
                o.only = args.parsed(|s| {
                    s.split(',')
                        .map(|p| match p.trim().parse::<u8>() {
                            Ok(n @ 1..=5) => Ok(n),
                            _ => Err(format!("{p:?}: expected section numbers 1 to 5")),
                        })
                        .collect()
                })?
            }
            _ => return Err(args.unknown(&arg)),
        }
    }
    Ok(Some(o))
}
