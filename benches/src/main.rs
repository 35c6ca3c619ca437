//! `pagestream-bench`: pagestream on every runtime against what a user would
//! use instead, and against fio, the device's ceiling.
//!
//! ```text
//! pagestream-bench scan --engine E --pattern P --cache C [--direct] [--json] …
//! pagestream-bench report [--quick]
//! ```
//!
//! ## Method
//!
//! - **Data**: the scan programs' stamped file (`target/pagestream-data/
//!   seqscan-<size>.dat`, created once), or `--file` (a path, or an object
//!   URL, `s3://bucket/key` or `http(s)://host/path`, read by the
//!   `object-store` engine: see `pagestream_bench::object`).
//! - **Blocks**: every pattern is a block list computed before the timing
//!   (`random`: all blocks once, seeded Fisher–Yates; `bitmap:D`:
//!   `round(D × blocks)` seeded distinct blocks, ascending).
//! - **Cache**: `cold` = `fsync` + `POSIX_FADV_DONTNEED` with a `mincore`
//!   check that at most 1% stays resident; `warm` = evicted, then read
//!   whole in order, checked resident; `hot` = pagestream's pool holds the
//!   pattern's blocks (filled by an untimed pass, the timed pass must read
//!   nothing); baselines have no pool, so hot is the OS page cache for them.
//! - **Timing**: from the first read to the last page checksummed, in the
//!   process (fio: its own `bw_bytes`; its start-up is not timed).
//! - **Checksum**: the scan programs' order-independent sum of per-page hashes of
//!   (block number, first and last 64 bytes): every engine and pattern over
//!   the same blocks prints the same value; fio's is `null`.
//! - **report**: engines alternate run by run inside every row, ≥ 5 repeats
//!   (3 with `--quick`), medians with min–max, ratios to the best baseline
//!   and to fio.

use pagestream_bench::args::{self, format_size};
use pagestream_bench::cli::{self, Command, ScanOpts, USAGE};
use pagestream_bench::data;
use pagestream_bench::report;
use pagestream_bench::scan::{run_scan, Target};
use pagestream_bench::timing::Spread;
use std::io;

fn scan(o: ScanOpts) -> io::Result<()> {
    let c = &o.cfg;
    let (path, nblocks) = data::scan_file(
        "pagestream-bench",
        o.file.as_deref(),
        o.create,
        o.size,
        c.block_size,
    )?;
    if c.engine == pagestream_bench::scan::Engine::Fio && !pagestream_bench::fio::available() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "fio is not installed (Debian: apt-get install -y fio); the fio engine needs it",
        ));
    }
    let target = match pagestream_bench::object::url_of(&path) {
        Some(url) => Target::object(url, nblocks),
        None => Target::open(&path, nblocks)?,
    };
    let blocks = c.pattern.blocks(nblocks, c.seed);
    if !o.json {
        println!(
            "pagestream-bench scan {}: {} blocks of {} ({}), engine={} pattern={} cache={} {} \
             readahead={} max_ios={} combine={}",
            path.display(),
            blocks.len(),
            c.block_size,
            format_size(nblocks * c.block_size as u64),
            c.engine,
            c.pattern,
            c.cache.name(),
            if target.plain.is_none() {
                "object"
            } else if c.direct {
                "O_DIRECT"
            } else {
                "buffered"
            },
            if c.readahead { "on" } else { "off" },
            c.max_ios,
            c.combine
        );
        println!(
            "{:>3} {:>9} {:>10} {:>12} {:>8} {:>8} {:>8} {:>20}",
            "#", "seconds", "MiB/s", "pages/s", "reads", "blk/read", "inflight", "checksum"
        );
    }
    let bar = report::progress(o.repeat as u64, o.json || o.repeat < 2, "runs");
    let mut runs = Vec::new();
    for rep in 0..o.repeat {
        let r = run_scan(c, &target, &blocks, rep)?;
        bar.inc(1);
        if o.json {
            println!("{}", r.json());
        } else {
            let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
            bar.suspend(|| {
                println!(
                    "{:>3} {:>9.3} {:>10.1} {:>12.0} {:>8} {:>8} {:>8} {:>20}",
                    rep,
                    r.seconds,
                    r.mib_per_s(),
                    r.pages_per_s(),
                    opt(r.reads),
                    r.mean_blocks_per_read
                        .map_or("-".to_string(), |v| format!("{v:.2}")),
                    opt(r.max_in_flight),
                    opt(r.checksum)
                )
            });
        }
        runs.push(r);
    }
    bar.finish_and_clear();
    if let Some(bad) = runs.iter().find(|r| r.checksum != runs[0].checksum) {
        return Err(io::Error::other(format!(
            "checksum mismatch between runs: run 0 gave {:?}, run {} gave {:?}",
            runs[0].checksum, bad.run, bad.checksum
        )));
    }
    if runs[0].blocks != blocks.len() as u64 {
        return Err(io::Error::other(format!(
            "read {} blocks, the pattern has {}",
            runs[0].blocks,
            blocks.len()
        )));
    }
    if !o.json && runs.len() > 1 {
        let v: Vec<f64> = runs.iter().map(|r| r.mib_per_s()).collect();
        let s = Spread::of(&v).expect("runs");
        println!(
            "median {:.1} MiB/s ({:.1}–{:.1}) over {} runs",
            s.median, s.min, s.max, s.n
        );
    }
    Ok(())
}

fn main() {
    args::main("pagestream-bench", USAGE, cli::parse, |cmd| match cmd {
        Command::Scan(o) => scan(o),
        Command::Report(o) => report::run(o),
        Command::Soak(o) => pagestream_bench::soak::run(&o).map(drop),
    });
}
