//! `report`: the standard matrix.
//!
//! 1. sequential scan, cold (buffered and O_DIRECT), warm, hot: every engine
//!    and baseline;
//! 2. bitmap scan: density × `max_ios` 0, 1, 2, 4, 8, 16 × kernel read-ahead
//!    on / off (`POSIX_FADV_RANDOM`) / O_DIRECT, cold;
//! 3. forward against backward at `io_combine_limit` 1, 8, 16, 32, cold,
//!    O_DIRECT;
//! 4. random 8 KiB reads at `max_ios` 1 … 64, cold, O_DIRECT, against fio
//!    at the same depth;
//! 5. remote storage: the `remote` example's `--json` rows, if it is built;
//! 6. object storage: `remote --serve nginx` (and `--serve moto`), the
//!    object-store engine over servers the report starts on loopback
//!    ([`crate::remote`]'s section 6);
//! 7. io_uring from tokio: random 8 KiB O_DIRECT reads at `max_ios` 1, 4,
//!    16, 64, a cold O_DIRECT and a warm buffered sequential scan, with
//!    `uring-tokio` spawned and in `block_on`, tokio's own io_uring fs,
//!    tokio-uring used directly, the thread pool under tokio, `uring` and
//!    fio (the warm row against a `pread` loop); CPU time per read beside
//!    each (`report --only tokio` runs it alone).
//!
//! Within a row the engines alternate run by run (the first engine rotates
//! with the repeat). A configuration that fails is reported with its error
//! and the rest goes on. Every run's checksum is compared with every other
//! run over the same block set.

use crate::args::format_size;
use crate::chart::{self, Marker, Series};
use crate::cli::ReportOpts;
use crate::data;
use crate::doc;
use crate::pattern::Pattern;
use crate::remote::StoreSection;
use crate::scan::{check, run_scan, Cache, Engine, RunResult, ScanConfig, Target};
use crate::timing::Spread;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// A progress bar on stderr of `len` steps, hidden when `quiet`.
pub fn progress(len: u64, quiet: bool, what: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {what} {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// One configuration of a row, run `repeat` times.
#[derive(Debug)]
pub struct Cell {
    /// Column name (engine, with a qualifier where a row mixes shapes).
    pub label: String,
    /// What runs.
    pub cfg: ScanConfig,
    /// The timed runs.
    pub runs: Vec<RunResult>,
    /// Why it could not run, if it could not.
    pub error: Option<String>,
}

impl Cell {
    /// Median, min and max MiB/s.
    pub fn spread(&self) -> Option<Spread> {
        Spread::of(&self.runs.iter().map(|r| r.mib_per_s()).collect::<Vec<_>>())
    }

    /// Median CPU µs per I/O request ([`RunResult::cpu_us_per_read`]).
    pub fn cpu_per_read(&self) -> Option<f64> {
        median_of(self, RunResult::cpu_us_per_read)
    }

    /// Median CPU µs per page ([`RunResult::cpu_us_per_page`]).
    pub fn cpu_per_page(&self) -> Option<f64> {
        median_of(self, RunResult::cpu_us_per_page)
    }

    fn pages_spread(&self) -> Option<Spread> {
        Spread::of(
            &self
                .runs
                .iter()
                .map(|r| r.pages_per_s())
                .collect::<Vec<_>>(),
        )
    }
}

/// One row: cells over one file, alternating.
#[derive(Debug)]
pub struct Row {
    /// Row name.
    pub label: String,
    /// The x value of this row in the section's chart.
    pub x: f64,
    /// Index of the file in the report's targets.
    pub target: usize,
    /// The configurations.
    pub cells: Vec<Cell>,
    /// What the row's ratio columns compare with: fio, the device's
    /// ceiling, unless the row says otherwise (pread-loop for warm reads,
    /// which fio's io_uring engine does slowly).
    pub reference: Engine,
}

impl Row {
    /// A row of `cells` over file `target`, compared with fio.
    fn new(label: impl Into<String>, x: f64, target: usize, cells: Vec<Cell>) -> Row {
        Row {
            label: label.into(),
            x,
            target,
            cells,
            reference: Engine::Fio,
        }
    }

    /// The reference's cell and median MiB/s, if it ran.
    pub fn reference(&self) -> Option<(&Cell, f64)> {
        self.cells
            .iter()
            .find(|c| c.cfg.engine == self.reference)
            .and_then(|c| c.spread().map(|s| (c, s.median)))
    }

    /// The best baseline (not pagestream, not a reference such as fio) by
    /// median MiB/s.
    pub fn best_baseline(&self) -> Option<(&Cell, f64)> {
        self.cells
            .iter()
            .filter(|c| c.cfg.engine.is_baseline())
            .filter_map(|c| c.spread().map(|s| (c, s.median)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// fio's median MiB/s, if it ran.
    pub fn fio(&self) -> Option<f64> {
        self.cells
            .iter()
            .find(|c| c.cfg.engine == Engine::Fio)
            .and_then(|c| c.spread())
            .map(|s| s.median)
    }
}

/// One section of the report.
#[derive(Debug)]
pub struct Section {
    /// 1–5.
    pub id: u8,
    /// Heading.
    pub title: String,
    /// What it shows and how.
    pub note: String,
    /// The rows.
    pub rows: Vec<Row>,
    /// Wall-clock seconds the section took (runs, cache preparation, fio
    /// start-up).
    pub seconds: f64,
}

/// File sizes and repeats of a report.
#[derive(Debug, Clone, Copy)]
struct Scale {
    repeat: usize,
    seq: u64,
    /// Smallest bitmap-scan file; sparser bitmaps get larger files (see
    /// [`bitmap_file`]), up to `bitmap_max`.
    bitmap: u64,
    bitmap_max: u64,
    /// Blocks a bitmap scan should select at least, file size permitting.
    bitmap_blocks: u64,
    backward: u64,
    random: u64,
    densities: &'static [f64],
    bitmap_ios: &'static [usize],
    combines: &'static [usize],
    depths: &'static [usize],
    /// Section 7: the random rows' file, their depths, the sequential
    /// rows' file.
    tokio_random: u64,
    tokio_depths: &'static [usize],
    tokio_seq: u64,
}

const FULL: Scale = Scale {
    repeat: 5,
    seq: 1 << 30,
    bitmap: 64 << 20,
    bitmap_max: 1 << 30,
    bitmap_blocks: 1000,
    backward: 128 << 20,
    random: 64 << 20,
    densities: &[0.001, 0.01, 0.1, 0.5, 1.0],
    bitmap_ios: &[0, 1, 2, 4, 8, 16],
    combines: &[1, 8, 16, 32],
    depths: &[1, 2, 4, 8, 16, 32, 64],
    tokio_random: 128 << 20,
    tokio_depths: &[1, 4, 16, 64],
    tokio_seq: 1 << 30,
};

const QUICK: Scale = Scale {
    repeat: 3,
    seq: 64 << 20,
    bitmap: 32 << 20,
    bitmap_max: 128 << 20,
    bitmap_blocks: 300,
    backward: 32 << 20,
    random: 16 << 20,
    densities: &[0.01, 0.1, 1.0],
    bitmap_ios: &[0, 16],
    combines: &[1, 16],
    depths: &[1, 16, 64],
    tokio_random: 32 << 20,
    tokio_depths: &[1, 4, 16, 64],
    tokio_seq: 256 << 20,
};

const BS: usize = 8192;

/// A run that lost more than this fraction of its wall time to host CPU
/// steal is flagged in the report.
pub(crate) const STEAL_FRACTION: f64 = 0.01;

/// Whether the hypervisor stole more than [`STEAL_FRACTION`] of `r`'s time.
pub(crate) fn stolen_from(r: &RunResult) -> bool {
    r.steal_seconds
        .is_some_and(|s| s > STEAL_FRACTION * r.seconds.max(f64::MIN_POSITIVE))
}

/// The file a bitmap scan of `density` runs on: large enough that it selects
/// `scale.bitmap_blocks` blocks (a power of two of bytes, at least
/// `scale.bitmap`, at most `scale.bitmap_max`). On a small file a sparse
/// bitmap is a few dozen blocks, and the look-ahead distance, which starts
/// at one block and doubles with each read waited for, is still
/// ramping up when the scan ends: that measured the ramp, not the scan.
fn bitmap_file(scale: &Scale, density: f64) -> u64 {
    let want = (scale.bitmap_blocks as f64 / density.max(1e-9)) * BS as f64;
    let want = if want >= scale.bitmap_max as f64 {
        scale.bitmap_max
    } else {
        (want as u64).next_power_of_two()
    };
    want.clamp(scale.bitmap, scale.bitmap_max)
}

fn cfg(engine: Engine, pattern: Pattern, cache: Cache) -> ScanConfig {
    ScanConfig {
        engine,
        pattern,
        cache,
        direct: engine.direct_only(),
        readahead: true,
        block_size: BS,
        combine: 16,
        max_ios: 16,
        pool_frames: 16384,
        backward_combining: true,
        seed: 1,
        full: false,
        nowait: true,
        workers: pagestream_runtimes::TOKIO_WORKERS,
        fixed_buffers: false,
        yield_budget: pagestream::YieldBudget::DEFAULT,
        gap_limit: 0,
    }
}

fn cell(label: impl Into<String>, cfg: ScanConfig, fio_ok: bool) -> Option<Cell> {
    check(&cfg).ok()?;
    let error = (cfg.engine == Engine::Fio && !fio_ok)
        .then(|| "fio is not installed (apt-get install -y fio)".to_string());
    Some(Cell {
        label: label.into(),
        cfg,
        runs: Vec::new(),
        error,
    })
}

/// The files and sections of a report at `scale`.
fn plan(scale: &Scale, only: &[u8], fio_ok: bool) -> (Vec<u64>, Vec<Section>) {
    let mut sizes: Vec<u64> = Vec::new();
    let mut target = |size: u64| match sizes.iter().position(|&s| s == size) {
        Some(i) => i,
        None => {
            sizes.push(size);
            sizes.len() - 1
        }
    };
    let mut sections = Vec::new();
    use Engine::*;
    if only.contains(&1) {
        let t = target(scale.seq);
        let mut rows = Vec::new();
        for (label, cache, direct) in [
            ("cold, buffered", Cache::Cold, false),
            ("cold, O_DIRECT", Cache::Cold, true),
            ("warm", Cache::Warm, false),
            ("hot", Cache::Hot, false),
        ] {
            let cells = Engine::ALL
                .into_iter()
                .filter_map(|e| {
                    let mut c = cfg(e, Pattern::Forward, cache);
                    c.direct |= direct;
                    if direct && matches!(e, FadvisePrefetch) {
                        return None; // advice means nothing to O_DIRECT
                    }
                    let l = if e.direct_only() && !direct {
                        format!("{e} (O_DIRECT)")
                    } else {
                        e.name().to_string()
                    };
                    cell(l, c, fio_ok)
                })
                .collect();
            rows.push(Row::new(label, rows.len() as f64, t, cells));
        }
        sections.push(Section {
            id: 1,
            title: format!(
                "Sequential scan, cold / warm / hot ({})",
                format_size(scale.seq)
            ),
            note: "forward, max_ios 16, io_combine_limit 16 (fio: bs 128 KiB, iodepth 16, \
                   io_uring). hot: pagestream's pool holds the file; the baselines have no \
                   pool, so their hot runs read from the OS page cache (as warm). glommio \
                   engines read with O_DIRECT only. fio's io_uring engine reads cached data \
                   far slower than a read() loop here, so in the warm and hot rows the fio \
                   ratio is not a ceiling."
                .into(),
            rows,
            seconds: 0.0,
        });
    }
    if only.contains(&2) {
        let mut rows = Vec::new();
        let mut files: Vec<String> = Vec::new();
        for (mode, direct, readahead) in [
            ("read-ahead on", false, true),
            ("read-ahead off", false, false),
            ("O_DIRECT", true, true),
        ] {
            for &d in scale.densities {
                let size = bitmap_file(scale, d);
                let t = target(size);
                let f = format!("{d}: {}", format_size(size));
                if !files.contains(&f) {
                    files.push(f);
                }
                for &mi in scale.bitmap_ios {
                    let engines: &[Engine] = match (direct, readahead) {
                        (true, _) => &[
                            ThreadPool,
                            TokioUring,
                            Glommio,
                            Uring,
                            PreadLoop,
                            GlommioStream,
                        ],
                        (false, true) => {
                            &[ThreadPool, TokioUring, Uring, PreadLoop, FadvisePrefetch]
                        }
                        (false, false) => {
                            &[ThreadPool, TokioUring, Uring, PreadLoop, FadvisePrefetch]
                        }
                    };
                    let cells = engines
                        .iter()
                        .filter_map(|&e| {
                            let mut c = cfg(e, Pattern::Bitmap(d), Cache::Cold);
                            c.direct |= direct;
                            c.readahead = readahead;
                            c.max_ios = mi;
                            if e == FadvisePrefetch && mi == 0 {
                                return None; // no hints: it is pread-loop
                            }
                            cell(e.name(), c, fio_ok)
                        })
                        .collect();
                    rows.push(Row::new(
                        format!("{mode}, density {d}, max_ios {mi}"),
                        d,
                        t,
                        cells,
                    ));
                }
            }
        }
        sections.push(Section {
            id: 2,
            title: "Bitmap scan (cold)".into(),
            note: format!(
                "bitmap:DENSITY = that fraction of the blocks, seeded (seed 1), ascending; \
                 io_combine_limit 16. Files by density (sparse bitmaps on larger files, so \
                 that a scan selects about {} blocks and is not over while the look-ahead \
                 distance still ramps up from one block): {}. read-ahead off = \
                 POSIX_FADV_RANDOM on the file the engine reads. fio has no bitmap pattern.",
                scale.bitmap_blocks,
                files.join(", ")
            ),
            rows,
            seconds: 0.0,
        });
    }
    if only.contains(&3) {
        let t = target(scale.backward);
        let mut rows = Vec::new();
        for &comb in scale.combines {
            let mut cells = Vec::new();
            for e in [ThreadPool, TokioUring, Glommio, Uring, PreadLoop] {
                for p in [Pattern::Forward, Pattern::Backward] {
                    let mut c = cfg(e, p, Cache::Cold);
                    c.direct = true;
                    c.combine = comb;
                    cells.extend(cell(format!("{e} {p}"), c, fio_ok));
                }
            }
            let mut c = cfg(ThreadPool, Pattern::Backward, Cache::Cold);
            c.direct = true;
            c.combine = comb;
            c.backward_combining = false;
            cells.extend(cell("threadpool backward, no combining", c, fio_ok));
            rows.push(Row::new(
                format!("io_combine_limit {comb}"),
                comb as f64,
                t,
                cells,
            ));
        }
        sections.push(Section {
            id: 3,
            title: format!(
                "Forward against backward ({}, cold, O_DIRECT)",
                format_size(scale.backward)
            ),
            note: "max_ios 16; backward combining on unless the column says otherwise; \
                   pread-loop reads one block at a time either way."
                .into(),
            rows,
            seconds: 0.0,
        });
    }
    if only.contains(&4) {
        let t = target(scale.random);
        let mut rows = Vec::new();
        for &depth in scale.depths {
            let cells = [
                ThreadPool,
                TokioUring,
                Glommio,
                Uring,
                UringTokio,
                PreadLoop,
                GlommioStream,
                Fio,
            ]
            .into_iter()
            .filter_map(|e| {
                let mut c = cfg(e, Pattern::Random, Cache::Cold);
                c.direct = true;
                c.max_ios = depth;
                cell(e.name(), c, fio_ok)
            })
            .collect();
            rows.push(Row::new(format!("max_ios {depth}"), depth as f64, t, cells));
        }
        sections.push(Section {
            id: 4,
            title: format!(
                "Random 8 KiB reads ({}, cold, O_DIRECT)",
                format_size(scale.random)
            ),
            note: "every block once in a seeded random order (seed 1); fio: randread, bs 8 KiB, \
                   iodepth = max_ios, io_uring, its random map (every block once); pread-loop \
                   and its depth of 1 in every row."
                .into(),
            rows,
            seconds: 0.0,
        });
    }
    if only.contains(&7) {
        sections.push(tokio_section(scale, &mut target, fio_ok));
    }
    (sizes, sections)
}

/// The engines of section 7 (the warm row adds pread-loop).
const TOKIO_ENGINES: [Engine; 8] = [
    Engine::UringTokio,
    Engine::UringTokioBlockOn,
    Engine::TokioIoUring,
    Engine::TokioUringFs,
    Engine::BareUringTokio,
    Engine::ThreadPoolTokio,
    Engine::Uring,
    Engine::Fio,
];

/// Frames of the pagestream engines' pools in section 7: 8 MiB of 8 KiB
/// frames, room for 64 reads in flight and what the consumer holds, as a
/// service sizes its pool for its reads rather than its file (a 128 MiB pool
/// filled in random order costs about 5% at `max_ios` 1: every read lands in
/// memory not touched yet).
const TOKIO_POOL_FRAMES: usize = 1024;

/// Section 7, io_uring from tokio: the rows issue 17 asks for.
fn tokio_section(scale: &Scale, target: &mut impl FnMut(u64) -> usize, fio_ok: bool) -> Section {
    let cells = |pattern: Pattern, cache: Cache, direct: bool, max_ios: usize, extra: &[Engine]| {
        let cfg = |e: Engine| {
            let mut c = cfg(e, pattern, cache);
            c.direct = direct;
            c.max_ios = max_ios;
            if e.is_pagestream() {
                c.pool_frames = TOKIO_POOL_FRAMES;
            }
            c.fixed_buffers = matches!(
                e,
                Engine::Uring | Engine::UringTokio | Engine::UringTokioBlockOn
            );
            c
        };
        let mut one_worker = cfg(Engine::UringTokio);
        one_worker.workers = 1;
        TOKIO_ENGINES
            .iter()
            .chain(extra)
            .filter_map(|&e| cell(e.name(), cfg(e), fio_ok))
            .chain(cell("uring-tokio, 1 worker", one_worker, fio_ok))
            .collect::<Vec<_>>()
    };
    let mut rows = Vec::new();
    let t = target(scale.tokio_random);
    for &depth in scale.tokio_depths {
        rows.push(Row::new(
            format!("random 8 KiB, cold, O_DIRECT, max_ios {depth}"),
            depth as f64,
            t,
            cells(Pattern::Random, Cache::Cold, true, depth, &[]),
        ));
    }
    let t = target(scale.tokio_seq);
    rows.push(Row::new(
        "sequential, cold, O_DIRECT, max_ios 16",
        0.0,
        t,
        cells(Pattern::Forward, Cache::Cold, true, 16, &[]),
    ));
    let mut warm = Row::new(
        "sequential, warm, buffered, max_ios 16",
        0.0,
        t,
        cells(
            Pattern::Forward,
            Cache::Warm,
            false,
            16,
            &[Engine::PreadLoop],
        ),
    );
    warm.reference = Engine::PreadLoop;
    rows.push(warm);
    Section {
        id: 7,
        title: format!(
            "io_uring from tokio (random {}, sequential {})",
            format_size(scale.tokio_random),
            format_size(scale.tokio_seq)
        ),
        note: format!(
            "Every tokio engine runs on a multi-thread tokio runtime of {} workers (this \
             machine's cores; `scan --workers N`), and uring-tokio also on one of 1 worker. \
             pagestream's pools: {} frames of 8 KiB (`--pool-frames`), registered as io_uring \
             fixed buffers by uring and uring-tokio (`--fixed-buffers`, \
             `UringTokioEngine::register_pool`); every pagestream scan of a file larger than a \
             quarter of its pool goes through a BULKREAD ring (`RingSize::BULKREAD`), random \
             ones too. uring-tokio: pagestream-uring's \
             UringTokioEngine, the scan in a task spawned on the runtime \
             (`rt.block_on(rt.spawn(scan))`, as a `#[tokio::main]` program spawns its scan); \
             uring-tokio-blockon: the same engine, the scan polled in `block_on` (the body of \
             `#[tokio::main]` itself: a completion reaped on a worker wakes another thread); \
             threadpool-tokio: the thread-pool engine, the scan spawned the same way; \
             tokio-io-uring: tokio 1.54's own io_uring fs (`tokio::fs::File`, `--cfg \
             tokio_unstable`; max_ios tasks with a File each, seek + read_exact into a Vec), \
             a program built apart (benches/tokio-io-uring); tokio-uring-fs: tokio-uring used \
             directly (`File::read_exact_at`, max_ios tasks on `tokio_uring::start`); \
             bare-uring-tokio: the floor of any io_uring engine that learns of completions from \
             tokio's reactor, not a reader a user would write (one task, a ring and max_ios \
             buffers: it submits each read as a buffer frees, takes completions itself and \
             otherwise awaits the ring's descriptor, with no pool, stream or second task); uring: \
             pagestream-uring's own runtime; fio: io_uring, iodepth = max_ios. Random rows: \
             every block once in a seeded order (fio: randread, its random map). Sequential \
             rows: io_combine_limit 16; fio, tokio-io-uring, tokio-uring-fs and bare-uring-tokio read 128 KiB \
             requests, 16 in flight. The warm row compares with pread-loop (a plain read() \
             loop of 8 KiB; fio's io_uring engine reads cached data slowly). CPU µs/read: the \
             process's user + system CPU time over the timed section, every thread (tokio \
             workers, the reaper, I/O threads; fio: its job's usr + sys), per I/O request; \
             CPU vs: the ratio of CPU per page (the same work whatever the request size, and \
             the per-read ratio where requests are the same size).",
            pagestream_runtimes::TOKIO_WORKERS,
            TOKIO_POOL_FRAMES
        ),
        rows,
        seconds: 0.0,
    }
}

/// Runs the report.
pub fn run(o: ReportOpts) -> io::Result<()> {
    let scale = {
        let mut s = if o.quick { QUICK } else { FULL };
        if let Some(r) = o.repeat {
            s.repeat = r;
        }
        s
    };
    let out = o
        .out
        .clone()
        .unwrap_or_else(|| data::data_dir().with_file_name("bench-report"));
    std::fs::create_dir_all(&out)?;
    let fio_ok = crate::fio::available();
    if !fio_ok {
        eprintln!("pagestream-bench: note: fio is not installed; fio cells are reported as such");
    }
    let (sizes, mut sections) = plan(&scale, &o.only, fio_ok);
    // Build the tokio-io-uring program now, not under the progress bar.
    let mut tokio_cells = sections
        .iter_mut()
        .flat_map(|s| &mut s.rows)
        .flat_map(|r| &mut r.cells)
        .filter(|c| c.cfg.engine == Engine::TokioIoUring)
        .peekable();
    if tokio_cells.peek().is_some() {
        if let Err(e) = crate::tokio_io_uring::binary() {
            eprintln!("pagestream-bench: {e}");
            for c in tokio_cells {
                c.error = Some(e.to_string());
            }
        }
    }
    let mut targets = Vec::new();
    for &size in &sizes {
        let (path, nblocks) = data::scan_file("pagestream-bench", None, false, size, BS)?;
        targets.push(Target::open(&path, nblocks)?);
    }
    let started = Instant::now();
    let load_before = loadavg();
    let cpu_before = doc::CpuSnap::now();
    let mut load_peak = load1();
    let mut others_running = doc::running_others();
    let total: u64 = sections
        .iter()
        .flat_map(|s| &s.rows)
        .map(|r| (r.cells.len() * scale.repeat) as u64)
        .sum();
    let bar = progress(total, false, "runs");
    let mut checksums: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut problems: Vec<String> = Vec::new();
    for s in &mut sections {
        let section_start = Instant::now();
        for row in &mut s.rows {
            let target = &targets[row.target];
            bar.set_message(format!("§{} {}", s.id, row.label));
            let n = row.cells.len();
            for rep in 0..scale.repeat {
                for k in 0..n {
                    let c = &mut row.cells[(k + rep) % n];
                    bar.inc(1);
                    if c.error.is_some() {
                        continue;
                    }
                    let blocks = c.cfg.pattern.blocks(target.nblocks, c.cfg.seed);
                    match run_scan(&c.cfg, target, &blocks, rep) {
                        Ok(r) => {
                            if let Some(sum) = r.checksum {
                                let key = block_set_key(row.target, &c.cfg.pattern, c.cfg.seed);
                                let who =
                                    format!("§{} {} / {} run {rep}", s.id, row.label, c.label);
                                match checksums.get(&key) {
                                    None => {
                                        checksums.insert(key, (sum, who));
                                    }
                                    Some((first, by)) if *first != sum => problems.push(format!(
                                        "checksum mismatch over {key}: {by} gave {first}, {who} gave {sum}"
                                    )),
                                    Some(_) => {}
                                }
                            }
                            c.runs.push(r);
                        }
                        Err(e) => {
                            bar.suspend(|| {
                                eprintln!(
                                    "pagestream-bench: §{} {} / {}: {e}",
                                    s.id, row.label, c.label
                                )
                            });
                            c.error = Some(e.to_string());
                        }
                    }
                }
            }
            load_peak = load_peak.max(load1());
            doc::merge_running(&mut others_running, doc::running_others());
        }
        s.seconds = section_start.elapsed().as_secs_f64();
    }
    bar.finish_and_clear();
    let remote = if o.only.contains(&5) {
        Some(remote_rows(o.quick))
    } else {
        None
    };
    let objects = if o.only.contains(&6) {
        eprintln!("pagestream-bench: §6 object storage (nginx, moto on loopback) …");
        Some(crate::remote::measure_store_section(o.quick, o.repeat))
    } else {
        None
    };
    load_peak = load_peak.max(load1());
    let elapsed = started.elapsed();
    let meta = Meta {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        commit: git_commit(),
        when: utc_now(),
        seconds: elapsed.as_secs_f64(),
        repeat: scale.repeat,
        quick: o.quick,
        load_before,
        load_after: loadavg(),
        load_peak: load_peak.max(load1()),
        others_running,
        machine: doc::probe_for(&targets),
        cpu: cpu_before
            .zip(doc::CpuSnap::now())
            .map(|(a, b)| a.until(&b)),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        files: targets
            .iter()
            .map(|t| {
                format!(
                    "{} ({})",
                    t.path.display(),
                    format_size(t.nblocks * BS as u64)
                )
            })
            .collect(),
    };
    let md = markdown(
        &meta,
        &sections,
        remote.as_ref(),
        objects.as_ref(),
        &problems,
    );
    std::fs::write(out.join("report.md"), &md)?;
    let js = report_json(
        &meta,
        &sections,
        remote.as_ref(),
        objects.as_ref(),
        &problems,
    );
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&js).map_err(io::Error::other)?,
    )?;
    let charts = charts(&out, &sections)?;
    println!(
        "pagestream-bench report: {} runs in {:.0} s; wrote report.md, report.json and {} \
         chart(s) in {}",
        total,
        elapsed.as_secs_f64(),
        charts.len(),
        out.display()
    );
    // A partial run (--only) would replace the whole page with its
    // sections: it writes the page and the README only where told to.
    let doc_targets = if o.partial {
        o.doc.clone().map(|doc| doc::Targets {
            doc,
            readme: o.readme.clone(),
        })
    } else {
        doc::Targets::resolve(o.doc.clone(), o.readme.clone())
    };
    match doc_targets {
        Some(t) => doc::write(
            &t,
            &meta,
            &sections,
            remote.as_ref(),
            objects.as_ref(),
            &problems,
        )?,
        None if o.partial => println!(
            "--only: a partial report; docs/benchmarks.md and the README not written (--doc \
             PATH writes the page)"
        ),
        None => {
            println!("not at a workspace root and no --doc PATH: docs/benchmarks.md not written")
        }
    }
    for p in &problems {
        eprintln!("pagestream-bench: {p}");
    }
    if problems.is_empty() {
        println!(
            "checksums: every run over the same blocks agrees ({} block sets)",
            checksums.len()
        );
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{} checksum mismatch(es)",
            problems.len()
        )))
    }
}

/// Runs over the same block set must agree: forward, backward and random
/// all read every block of the file.
fn block_set_key(target: usize, p: &Pattern, seed: u64) -> String {
    match p {
        Pattern::Forward | Pattern::Backward | Pattern::Random => {
            format!("file {target}, all blocks")
        }
        Pattern::Bitmap(d) => format!("file {target}, bitmap:{d} seed {seed}"),
    }
}

/// What `report` records about its run.
pub(crate) struct Meta {
    pub(crate) command: String,
    pub(crate) commit: String,
    pub(crate) when: String,
    pub(crate) seconds: f64,
    pub(crate) repeat: usize,
    pub(crate) quick: bool,
    pub(crate) load_before: String,
    pub(crate) load_after: String,
    /// Highest 1-minute load average seen between rows.
    pub(crate) load_peak: f64,
    pub(crate) kernel: String,
    pub(crate) cpus: usize,
    pub(crate) files: Vec<String>,
    pub(crate) machine: doc::Machine,
    /// CPU time of this report, of other processes and of steal, over the run.
    pub(crate) cpu: Option<doc::CpuUse>,
    /// Other processes seen running between rows (name, most at once).
    pub(crate) others_running: BTreeMap<String, usize>,
}

/// The `remote` program's rows, measured in this process.
pub(crate) struct Remote {
    pub(crate) command: String,
    pub(crate) lines: Vec<Value>,
    pub(crate) error: Option<String>,
}

fn remote_rows(quick: bool) -> Remote {
    // --quick asks for fewer repeats.
    let args: &[&str] = if quick { &["--repeat", "3"] } else { &[] };
    let command = format!("remote --json {}", args.join(" "))
        .trim_end()
        .to_string();
    match crate::remote::json_rows(args) {
        Ok(lines) if lines.is_empty() => Remote {
            command,
            lines,
            error: Some("printed no JSON lines".into()),
        },
        Ok(lines) => Remote {
            command,
            lines,
            error: None,
        },
        Err(e) => Remote {
            command,
            lines: Vec::new(),
            error: Some(e),
        },
    }
}

/// The 1-minute load average (0 if unknown).
fn load1() -> f64 {
    loadavg()
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn git_commit() -> String {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = run(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{head} (work tree has uncommitted changes)")
    } else {
        head
    }
}

fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M:%S UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn fmt_spread(s: &Spread) -> String {
    format!("{:.1} ({:.1}–{:.1})", s.median, s.min, s.max)
}

fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "—".into(),
    }
}

fn markdown(
    meta: &Meta,
    sections: &[Section],
    remote: Option<&Remote>,
    objects: Option<&StoreSection>,
    problems: &[String],
) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# pagestream-bench report\n");
    let _ = writeln!(m, "- command: `{}`", meta.command);
    let _ = writeln!(m, "- commit: {}", meta.commit);
    let _ = writeln!(m, "- finished: {}, took {:.0} s", meta.when, meta.seconds);
    let _ = writeln!(
        m,
        "- machine: {} CPUs, kernel {}, load average before {} / after {}",
        meta.cpus, meta.kernel, meta.load_before, meta.load_after
    );
    let _ = writeln!(m, "- files: {}", meta.files.join(", "));
    let _ = writeln!(
        m,
        "- {} repeats per configuration{}, engines alternating run by run; MiB/s median (min–max); \
         ratios are of medians: against the best baseline of the row (pread-loop, \
         fadvise-prefetch, tokio-fs, glommio-stream, tokio-io-uring, tokio-uring-fs) and \
         against fio (or the row's reference). in flight: most reads \
         in flight (pagestream's stats). CPU µs/page, CPU µs/read (per I/O request): this \
         process's user + system time (fio: its own; tokio-io-uring: its process's); CPU vs: \
         the ratio of CPU per page to the reference's. device qd, KiB/req: the file's block \
         device during the run \
         (/proc/diskstats: mean requests in flight, mean request size; every process's I/O)",
        meta.repeat,
        if meta.quick { " (--quick: reduced matrix, small files)" } else { "" }
    );
    let (stolen, all) = sections
        .iter()
        .flat_map(|s| &s.rows)
        .flat_map(|r| &r.cells)
        .flat_map(|c| &c.runs)
        .fold((0, 0), |(k, n), r| (k + usize::from(stolen_from(r)), n + 1));
    let _ = writeln!(
        m,
        "- host CPU steal: {stolen} of {all} runs lost more than {:.0}% of their time to the \
         hypervisor running something else on this machine's vCPUs (/proc/stat); column \
         steal: such runs of the cell. They run slower for reasons not their own: compare \
         cells whose steal counts differ with care",
        STEAL_FRACTION * 100.0
    );
    if problems.is_empty() {
        let _ = writeln!(m, "- checksums: every run over the same blocks agrees");
    } else {
        let _ = writeln!(m, "- **checksum mismatches**:");
        for p in problems {
            let _ = writeln!(m, "  - {p}");
        }
    }
    headline(&mut m, sections);
    behind(&mut m, sections);
    for s in sections {
        section_md(&mut m, s);
    }
    if let Some(r) = remote {
        remote_md(&mut m, r);
    }
    if let Some(o) = objects {
        crate::remote::section_markdown(&mut m, o);
    }
    m
}

/// Section `s`'s heading, note and table.
pub(crate) fn section_md(m: &mut String, s: &Section) {
    let runs: usize = s
        .rows
        .iter()
        .flat_map(|r| &r.cells)
        .map(|c| c.runs.len())
        .sum();
    let _ = writeln!(
        m,
        "\n## {}. {}\n\n{} ({runs} runs, {:.0} s.)\n",
        s.id, s.title, s.note, s.seconds
    );
    // What the ratios compare with: fio, or each row's own reference.
    let mut refs: Vec<&str> = Vec::new();
    for r in &s.rows {
        if !refs.contains(&r.reference.name()) {
            refs.push(r.reference.name());
        }
    }
    let vs = if refs.is_empty() {
        "fio".to_string()
    } else {
        refs.join(" / ")
    };
    let _ = writeln!(
        m,
        "| row | engine | MiB/s | pages/s | reads × blocks | in flight | CPU µs/page | CPU µs/read | device qd, KiB/req | steal | vs best baseline | vs {vs} | CPU vs {vs} |"
    );
    let _ = writeln!(
        m,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for row in &s.rows {
        let best = row.best_baseline();
        let reference = row.reference();
        let ref_cpu = reference.and_then(|(c, _)| c.cpu_per_page());
        for c in &row.cells {
            let label = if c.cfg.engine.is_pagestream() {
                format!("**{}**", c.label)
            } else {
                c.label.clone()
            };
            match (&c.error, c.spread()) {
                (Some(e), _) if c.runs.is_empty() => {
                    let _ = writeln!(
                        m,
                        "| {} | {} | error: {} | | | | | | | | | | |",
                        row.label,
                        label,
                        e.replace('|', "/")
                    );
                }
                (_, Some(sp)) => {
                    let r = &c.runs[0];
                    let pages = c.pages_spread().map_or(0.0, |p| p.median);
                    let shape = match (r.reads, r.mean_blocks_per_read) {
                        (Some(n), Some(b)) => format!("{n} × {b:.2}"),
                        _ => "—".into(),
                    };
                    let inflight = r.max_in_flight.map_or("—".into(), |v| v.to_string());
                    let cpu_page = c.cpu_per_page();
                    let cpu = cpu_page.map_or("—".into(), |v| format!("{v:.2}"));
                    let cpu_read = c.cpu_per_read().map_or("—".into(), |v| format!("{v:.2}"));
                    let qd = Spread::of(
                        &c.runs
                            .iter()
                            .filter_map(|r| r.disk.map(|d| d.queue_depth))
                            .collect::<Vec<_>>(),
                    );
                    let kib = Spread::of(
                        &c.runs
                            .iter()
                            .filter_map(|r| r.disk.map(|d| d.kib_per_request))
                            .collect::<Vec<_>>(),
                    );
                    let device = match (qd, kib) {
                        (Some(q), Some(k)) => format!("{:.1}, {:.0}", q.median, k.median),
                        _ => "—".into(),
                    };
                    let vs_best = match best {
                        Some((b, _)) if std::ptr::eq(b, c) => "best".to_string(),
                        _ => ratio(sp.median, best.map(|b| b.1)),
                    };
                    let steal = format!(
                        "{}/{}",
                        c.runs.iter().filter(|r| stolen_from(r)).count(),
                        c.runs.len()
                    );
                    let is_ref = c.cfg.engine == row.reference;
                    let _ = writeln!(
                        m,
                        "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                        row.label,
                        label,
                        fmt_spread(&sp),
                        pages,
                        shape,
                        inflight,
                        cpu,
                        cpu_read,
                        device,
                        steal,
                        vs_best,
                        if is_ref {
                            "1.00x".into()
                        } else {
                            ratio(sp.median, reference.map(|r| r.1))
                        },
                        match cpu_page {
                            Some(_) if is_ref => "1.00x".into(),
                            Some(v) => ratio(v, ref_cpu),
                            None => "—".into(),
                        }
                    );
                }
                _ => {}
            }
        }
    }
}

/// Section 5: the `remote` example's rows, or why there are none.
pub(crate) fn remote_md(m: &mut String, r: &Remote) {
    let _ = writeln!(
        m,
        "\n## 5. Remote storage (the latency wrapper)\n\n`{}`\n",
        r.command
    );
    if let Some(e) = &r.error {
        let _ = writeln!(
            m,
            "| row | result |\n| --- | --- |\n| remote | **{}** |",
            e.replace('|', "/")
        );
    }
    if !r.lines.is_empty() {
        // The fields that tell the story, where the rows have them.
        const KEYS: [&str; 11] = [
            "row",
            "reader",
            "streams",
            "combine",
            "max_ios",
            "pages",
            "seconds",
            "round_trips",
            "reads",
            "max_in_flight",
            "speedup_vs_one_at_a_time",
        ];
        let keys: Vec<&str> = KEYS
            .into_iter()
            .filter(|k| r.lines.iter().any(|l| l.get(k).is_some()))
            .collect();
        let _ = writeln!(m, "| {} |", keys.join(" | "));
        let _ = writeln!(m, "|{}", " --- |".repeat(keys.len()));
        for l in &r.lines {
            let vals: Vec<String> = keys
                .iter()
                .map(|k| match l.get(k) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) if n.is_f64() => {
                        format!("{:.4}", n.as_f64().unwrap_or(0.0))
                    }
                    Some(v) => v.to_string(),
                    None => String::new(),
                })
                .collect();
            let _ = writeln!(m, "| {} |", vals.join(" | ").replace('\n', " "));
        }
        let _ = writeln!(m, "\nEvery field of every row is in report.json.");
    }
}

/// The headline table: per row, each pagestream engine's median MiB/s with
/// its ratios to the row's best baseline and to fio, then those two.
fn headline(m: &mut String, sections: &[Section]) {
    let _ = writeln!(
        m,
        "\n## Headline\n\nMiB/s median (× best baseline / × fio; ratios of medians). \
         Bitmap rows at the deepest max_ios; section 3 at its largest io_combine_limit.\n"
    );
    let _ = writeln!(
        m,
        "| § | row | threadpool | tokio-uring | glommio | uring | uring-tokio | best baseline | fio |"
    );
    let _ = writeln!(m, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for s in sections {
        let deepest = s
            .rows
            .iter()
            .filter_map(|r| r.cells.first())
            .map(|c| c.cfg.max_ios)
            .max();
        let widest = s
            .rows
            .iter()
            .filter_map(|r| r.cells.first())
            .map(|c| c.cfg.combine)
            .max();
        for row in &s.rows {
            let first = match row.cells.first() {
                Some(c) => c,
                None => continue,
            };
            if s.id == 2 && Some(first.cfg.max_ios) != deepest {
                continue;
            }
            if s.id == 3 && Some(first.cfg.combine) != widest {
                continue;
            }
            let best = row.best_baseline();
            let fio = row.fio();
            let patterns: Vec<Pattern> = if s.id == 3 {
                vec![Pattern::Forward, Pattern::Backward]
            } else {
                vec![first.cfg.pattern]
            };
            for p in patterns {
                let mut line = format!(
                    "| {} | {}{} |",
                    s.id,
                    row.label,
                    if s.id == 3 {
                        format!(", {p}")
                    } else {
                        String::new()
                    }
                );
                for e in [
                    Engine::ThreadPool,
                    Engine::TokioUring,
                    Engine::Glommio,
                    Engine::Uring,
                    Engine::UringTokio,
                ] {
                    let c = row.cells.iter().find(|c| {
                        c.cfg.engine == e && c.cfg.pattern == p && c.cfg.backward_combining
                    });
                    let v = match c.and_then(|c| c.spread()) {
                        Some(sp) => format!(
                            "{:.0} ({} / {})",
                            sp.median,
                            ratio(sp.median, best.map(|b| b.1)),
                            ratio(sp.median, fio)
                        ),
                        None => "—".into(),
                    };
                    let _ = write!(line, " {v} |");
                }
                let b = best.map_or("—".into(), |(c, v)| format!("{v:.0} ({})", c.label));
                let f = fio.map_or("—".into(), |v| format!("{v:.0}"));
                let _ = writeln!(m, "{line} {b} | {f} |");
            }
        }
    }
}

/// Median of `f` over a cell's runs.
fn median_of(c: &Cell, f: impl Fn(&RunResult) -> Option<f64>) -> Option<f64> {
    Spread::of(&c.runs.iter().filter_map(f).collect::<Vec<_>>()).map(|s| s.median)
}

/// What a cell's runs did, for explanations: device queue depth, KiB per
/// request, CPU µs per page (the per-run JSON also has µs per request at the device).
fn profile(c: &Cell) -> String {
    let qd = median_of(c, |r| r.disk.map(|d| d.queue_depth));
    let kib = median_of(c, |r| r.disk.map(|d| d.kib_per_request));
    let cpu = median_of(c, |r| {
        r.cpu_seconds.map(|s| s * 1e6 / r.blocks.max(1) as f64)
    });
    let f = |v: Option<f64>, d: usize| v.map_or("—".into(), |v| format!("{v:.d$}"));
    format!(
        "qd {}, {} KiB/req, {} µs CPU/page",
        f(qd, 1),
        f(kib, 0),
        f(cpu, 1)
    )
}

/// Rows where no pagestream engine reaches the best baseline (or fio), with
/// what the device and the CPU did in both, to explain them.
fn behind(m: &mut String, sections: &[Section]) {
    let mut lines = Vec::new();
    for s in sections {
        for row in &s.rows {
            let best_ps = row
                .cells
                .iter()
                .filter(|c| c.cfg.engine.is_pagestream())
                .filter_map(|c| c.spread().map(|sp| (c, sp.median)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            let Some((pc, pv)) = best_ps else { continue };
            let rivals = [
                row.best_baseline(),
                row.cells
                    .iter()
                    .find(|c| c.cfg.engine == Engine::Fio)
                    .and_then(|c| c.spread().map(|sp| (c, sp.median))),
            ];
            for (bc, bv) in rivals.into_iter().flatten() {
                if pv < bv {
                    lines.push(format!(
                        "| {} | {} | {} {:.0} ({}) | {} {:.0} ({}) | {:.2}x |",
                        s.id,
                        row.label,
                        pc.label,
                        pv,
                        profile(pc),
                        bc.label,
                        bv,
                        profile(bc),
                        pv / bv
                    ));
                }
            }
        }
    }
    let _ = writeln!(
        m,
        "\n## Where pagestream is behind\n\nRows where the best pagestream engine's median is \
         below the best baseline's or fio's, with what the device and the CPU did (medians).\n"
    );
    if lines.is_empty() {
        let _ = writeln!(m, "None: in every row a pagestream engine is ahead.");
        return;
    }
    let _ = writeln!(
        m,
        "| § | row | best pagestream MiB/s | ahead of it MiB/s | ratio |\n| --- | --- | --- | --- | --- |"
    );
    for l in lines {
        let _ = writeln!(m, "{l}");
    }
}

fn report_json(
    meta: &Meta,
    sections: &[Section],
    remote: Option<&Remote>,
    objects: Option<&StoreSection>,
    problems: &[String],
) -> Value {
    let secs: Vec<Value> = sections
        .iter()
        .map(|s| {
            let rows: Vec<Value> = s
                .rows
                .iter()
                .map(|row| {
                    let best = row.best_baseline();
                    let fio = row.fio();
                    let reference = row.reference();
                    let ref_cpu = reference.and_then(|(c, _)| c.cpu_per_page());
                    let cells: Vec<Value> = row
                        .cells
                        .iter()
                        .map(|c| {
                            let sp = c.spread();
                            json!({
                                "label": c.label,
                                "engine": c.cfg.engine.name(),
                                "median_mib_per_s": sp.map(|s| s.median),
                                "min_mib_per_s": sp.map(|s| s.min),
                                "max_mib_per_s": sp.map(|s| s.max),
                                "median_pages_per_s": c.pages_spread().map(|s| s.median),
                                "vs_best_baseline": sp.zip(best).map(|(s, b)| s.median / b.1),
                                "vs_fio": sp.zip(fio).map(|(s, f)| s.median / f),
                                "vs_reference": sp.zip(reference).map(|(s, r)| s.median / r.1),
                                "cpu_us_per_read": c.cpu_per_read(),
                                "cpu_us_per_page": c.cpu_per_page(),
                                "cpu_vs_reference": c.cpu_per_page().zip(ref_cpu).map(|(a, b)| a / b),
                                "error": c.error,
                                "runs": c.runs.iter().map(|r| r.json()).collect::<Vec<_>>(),
                            })
                        })
                        .collect();
                    json!({
                        "label": row.label,
                        "best_baseline": best.map(|b| b.0.label.clone()),
                        "best_baseline_mib_per_s": best.map(|b| b.1),
                        "fio_mib_per_s": fio,
                        "reference": row.reference.name(),
                        "reference_mib_per_s": reference.map(|r| r.1),
                        "cells": cells,
                    })
                })
                .collect();
            json!({"id": s.id, "title": s.title, "note": s.note, "seconds": s.seconds, "rows": rows})
        })
        .collect();
    json!({
        "command": meta.command,
        "commit": meta.commit,
        "finished": meta.when,
        "seconds": meta.seconds,
        "repeat": meta.repeat,
        "quick": meta.quick,
        "load_before": meta.load_before,
        "load_after": meta.load_after,
        "kernel": meta.kernel,
        "cpus": meta.cpus,
        "load_peak": meta.load_peak,
        "cpu_use": meta.cpu.map(|c| json!({"own": c.own, "others": c.others, "steal": c.steal})),
        "others_running": meta.others_running,
        "machine": {
            "cpu_model": meta.machine.cpu_model,
            "memory_bytes": meta.machine.memory,
            "device": meta.machine.device,
            "fs": meta.machine.fs,
            "read_ahead_kb": meta.machine.read_ahead_kb,
            "fio": meta.machine.fio,
        },
        "files": meta.files,
        "checksum_problems": problems,
        "sections": secs,
        "remote": remote.map(|r| json!({"command": r.command, "error": r.error, "rows": r.lines})),
        "object_store": objects.map(crate::remote::section_json),
    })
}

/// Median and range of MiB/s (or pages/s) per cell label over the rows of
/// `s` that `keep` accepts, as chart series against each row's x; the
/// series of section 3 are marked by direction.
fn series(s: &Section, keep: impl Fn(&Row) -> bool, pages: bool) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for row in s.rows.iter().filter(|r| keep(r)) {
        for c in &row.cells {
            let v = if pages { c.pages_spread() } else { c.spread() };
            let Some(v) = v else { continue };
            let p = chart::Point {
                x: row.x,
                median: v.median,
                min: v.min,
                max: v.max,
            };
            match out.iter_mut().find(|se| se.name == c.label) {
                Some(se) => se.points.push(p),
                None => out.push(Series {
                    name: c.label.clone(),
                    engine: c.cfg.engine,
                    marker: if !c.cfg.backward_combining {
                        Marker::Square
                    } else if c.cfg.pattern == Pattern::Backward {
                        Marker::Triangle
                    } else {
                        Marker::Circle
                    },
                    points: vec![p],
                }),
            }
        }
    }
    out
}

/// A chart [`charts`] wrote: its file name (in the output directory), its
/// section and what it shows.
#[derive(Debug, Clone)]
pub(crate) struct ChartFile {
    pub(crate) file: String,
    pub(crate) section: u8,
    pub(crate) title: String,
}

/// The distinct x values of `s`'s rows that `keep` accepts, ascending.
fn xs(s: &Section, keep: impl Fn(&Row) -> bool) -> Vec<f64> {
    let mut v: Vec<f64> = s.rows.iter().filter(|r| keep(r)).map(|r| r.x).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// Writes the charts of `sections` into `out`.
pub(crate) fn charts(out: &Path, sections: &[Section]) -> io::Result<Vec<ChartFile>> {
    use chart::Scale::{Linear, Log};
    let mut done = Vec::new();
    for s in sections {
        let add = |file: String, title: String| ChartFile {
            file,
            section: s.id,
            title,
        };
        match s.id {
            1 => {
                for row in &s.rows {
                    let bars: Vec<chart::Bar> = row
                        .cells
                        .iter()
                        .filter_map(|c| {
                            c.spread().map(|sp| chart::Bar {
                                name: c.cfg.engine.name().to_string(),
                                engine: c.cfg.engine,
                                value: chart::Point {
                                    x: 0.0,
                                    median: sp.median,
                                    min: sp.min,
                                    max: sp.max,
                                },
                            })
                        })
                        .collect();
                    if bars.is_empty() {
                        continue;
                    }
                    let slug = row
                        .label
                        .replace([',', ' '], "")
                        .replace("O_DIRECT", "-direct");
                    let file = format!("seqscan-{slug}.svg");
                    let direct = row.cells.iter().all(|c| c.cfg.direct);
                    let title = format!(
                        "sequential scan, {}{}",
                        row.label,
                        if direct {
                            ""
                        } else {
                            " (glommio engines: O_DIRECT)"
                        }
                    );
                    chart::bar_chart(&out.join(&file), &title, "MiB/s (median, min–max)", &bars)?;
                    done.push(add(file, title));
                }
            }
            2 => {
                let top = s
                    .rows
                    .iter()
                    .filter_map(|r| r.cells.first().map(|c| c.cfg.max_ios))
                    .max()
                    .unwrap_or(16);
                for (mode, slug) in [
                    ("read-ahead on", "ra-on"),
                    ("read-ahead off", "ra-off"),
                    ("O_DIRECT", "direct"),
                ] {
                    // density on x, at the deepest max_ios
                    let keep = |r: &Row| {
                        r.label.starts_with(mode) && r.label.ends_with(&format!("max_ios {top}"))
                    };
                    let ser = series(s, keep, false);
                    if ser.is_empty() {
                        continue;
                    }
                    let file = format!("bitmap-{slug}.svg");
                    let title = format!("bitmap scan, cold, {mode}, max_ios {top}");
                    chart::line_chart(
                        &out.join(&file),
                        &title,
                        "density (fraction of the blocks)",
                        "MiB/s (median, min–max)",
                        Log,
                        Log,
                        Some(&xs(s, keep)),
                        &ser,
                    )?;
                    done.push(add(file, title));
                }
            }
            3 => {
                let ser = series(s, |_| true, false);
                if ser.is_empty() {
                    continue;
                }
                let title = "forward (●) and backward (▲; ■ without combining), cold, O_DIRECT";
                chart::line_chart(
                    &out.join("backward.svg"),
                    title,
                    "io_combine_limit (blocks)",
                    "MiB/s (median, min–max)",
                    Log,
                    Linear,
                    Some(&xs(s, |_| true)),
                    &ser,
                )?;
                done.push(add("backward.svg".into(), title.into()));
            }
            4 => {
                let ser = series(s, |_| true, true);
                if ser.is_empty() {
                    continue;
                }
                let title = "random 8 KiB reads, cold, O_DIRECT";
                chart::line_chart(
                    &out.join("random.svg"),
                    title,
                    "max_ios (fio: iodepth)",
                    "pages/s (median, min–max)",
                    Log,
                    Log,
                    Some(&xs(s, |_| true)),
                    &ser,
                )?;
                done.push(add("random.svg".into(), title.into()));
            }
            7 => {
                let keep = |r: &Row| r.cells.iter().all(|c| c.cfg.pattern == Pattern::Random);
                let ser = series(s, keep, true);
                if ser.is_empty() {
                    continue;
                }
                let title = "io_uring from tokio: random 8 KiB reads, cold, O_DIRECT";
                chart::line_chart(
                    &out.join("tokio-random.svg"),
                    title,
                    "max_ios (fio: iodepth)",
                    "pages/s (median, min–max)",
                    Log,
                    Log,
                    Some(&xs(s, keep)),
                    &ser,
                )?;
                done.push(add("tokio-random.svg".into(), title.into()));
            }
            _ => {}
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Section 7 holds the rows issue 17 names, each with every tokio
    /// engine, uring and fio, the warm row with pread-loop as its reference.
    #[test]
    fn tokio_section_has_the_rows_and_engines_asked_for() {
        let (_, sections) = plan(&QUICK, &[7], true);
        let [s] = &sections[..] else {
            panic!("one section: {sections:?}")
        };
        assert_eq!(s.id, 7);
        let labels: Vec<&str> = s.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "random 8 KiB, cold, O_DIRECT, max_ios 1",
                "random 8 KiB, cold, O_DIRECT, max_ios 4",
                "random 8 KiB, cold, O_DIRECT, max_ios 16",
                "random 8 KiB, cold, O_DIRECT, max_ios 64",
                "sequential, cold, O_DIRECT, max_ios 16",
                "sequential, warm, buffered, max_ios 16",
            ]
        );
        for row in &s.rows {
            let engines: Vec<Engine> = row.cells.iter().map(|c| c.cfg.engine).collect();
            for e in TOKIO_ENGINES {
                assert!(engines.contains(&e), "{}: no {e}", row.label);
            }
            let warm = row.cells[0].cfg.cache == Cache::Warm;
            assert_eq!(engines.contains(&Engine::PreadLoop), warm, "{}", row.label);
            let want = if warm { Engine::PreadLoop } else { Engine::Fio };
            assert_eq!(row.reference, want, "{}", row.label);
            for c in &row.cells {
                assert_eq!(c.cfg.direct, !warm, "{} / {}", row.label, c.label);
                assert!(c.error.is_none(), "{} / {}", row.label, c.label);
            }
        }
    }

    /// References — fio and bare-uring-tokio, the floor of reading through
    /// tokio's reactor — are never a row's best baseline, however fast.
    #[test]
    fn references_are_never_the_best_baseline() {
        let run = |e: Engine, mib: f64| {
            let cfg = cfg(e, Pattern::Random, Cache::Cold);
            Cell {
                label: e.name().into(),
                runs: vec![RunResult {
                    cfg: cfg.clone(),
                    run: 0,
                    blocks: 128,
                    bytes: 1 << 20,
                    seconds: 1.0 / mib,
                    cpu_seconds: None,
                    disk: None,
                    steal_seconds: None,
                    reads: None,
                    mean_blocks_per_read: None,
                    max_in_flight: None,
                    checksum: None,
                    resident_before: 0.0,
                    extra: Default::default(),
                }],
                cfg,
                error: None,
            }
        };
        let row = Row::new(
            "random",
            1.0,
            0,
            vec![
                run(Engine::UringTokio, 100.0),
                run(Engine::TokioUringFs, 90.0),
                run(Engine::BareUringTokio, 120.0),
                run(Engine::Fio, 130.0),
            ],
        );
        let (best, mib) = row.best_baseline().expect("a baseline ran");
        assert_eq!(best.cfg.engine, Engine::TokioUringFs);
        assert!((mib - 90.0).abs() < 1e-9, "{mib}");
    }

    /// Sparser bitmaps get larger files, within the scale's bounds, each a
    /// power of two, and each selects the blocks asked for where the largest
    /// file allows.
    #[test]
    fn bitmap_files_grow_as_density_falls() {
        for scale in [&FULL, &QUICK] {
            let mut last = u64::MAX;
            for &d in &[0.0001, 0.001, 0.01, 0.1, 0.5, 1.0] {
                let size = bitmap_file(scale, d);
                assert!(size.is_power_of_two(), "{size} at {d}");
                assert!(
                    (scale.bitmap..=scale.bitmap_max).contains(&size),
                    "{size} at {d}"
                );
                assert!(size <= last, "{size} at {d} grew with density");
                let selected = (size / BS as u64) as f64 * d;
                assert!(
                    selected >= scale.bitmap_blocks as f64 || size == scale.bitmap_max,
                    "{size} at {d} selects only {selected} blocks"
                );
                last = size;
            }
        }
    }
}
