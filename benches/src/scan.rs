//! One measured configuration: [`ScanConfig`] in, [`RunResult`]s out.
//!
//! [`run_scan`] prepares the page cache the way the scan programs do
//! (`cold`: `fsync` + `POSIX_FADV_DONTNEED`, checked with `mincore`; `warm`:
//! evicted, then read whole in order, checked resident; `hot`: pagestream's
//! pool holds every block of the pattern) and times one pass over the pattern's blocks with the
//! chosen engine, checksumming every page with the scan programs' order-independent
//! checksum. Engines are started before the timing (a warm-up read through
//! a separate pool, before the cache is prepared), so a run measures reading,
//! not thread start-up.
//!
//! The pool of a cold or warm run without a ring is built with
//! [`PoolBuilder::prefault`](pagestream::PoolBuilder::prefault), before the
//! timing, so the timed pass starts with an empty pool whose memory is
//! already mapped (JSON `pool_touched_frames`: its frames). A freshly
//! allocated pool is lazily zero-filled memory: the first read into each
//! frame would otherwise pay two page faults and two page clears inside the
//! kernel's `O_DIRECT` submission (`get_user_pages`), about 4–5 µs per 8 KiB
//! read on the development VM — a cost of a pool's first use, not of
//! reading, which a long-running program (and fio, whose few buffers are
//! reused) never pays.
//!
//! An object URL (`s3://bucket/key`, `http(s)://host/path`) is a
//! [`Target`] too ([`Target::object`]), read by [`Engine::ObjectStore`]
//! (pagestream on the `object-store` runtime) in the cache states that
//! apply to it: `none` (every block from the server) and `hot`.

use crate::cache;
use crate::checksum::Checksum;
use crate::pattern::Pattern;
use crate::timing::mib_per_s;
use crate::{baselines, fio, tokio_io_uring};
use futures::StreamExt;
use pagestream::{source, BlockSource, BufferPool, ReadStream, RingSize, StreamStats, YieldBudget};
use pagestream_runtimes::{Env, FileOptions, Runtime, SendEnv, SpawnWorkload, Workload};
use serde_json::{json, Map, Value};
use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

/// What reads the blocks: pagestream on a runtime, or a baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Engine {
    /// pagestream, thread-pool engine.
    ThreadPool,
    /// pagestream, tokio-uring engine.
    TokioUring,
    /// pagestream, glommio engine (O_DIRECT only).
    Glommio,
    /// pagestream, pagestream-uring's own io_uring driver.
    Uring,
    /// pagestream, pagestream-uring's driver from tokio (`UringTokioEngine`,
    /// the `uring-tokio` runtime), the scan in a task spawned on the
    /// multi-thread runtime: what a `#[tokio::main]` program that spawns
    /// its scan gets.
    UringTokio,
    /// `uring-tokio-blockon`: the same engine and runtime, the scan polled
    /// in the runtime's `block_on` (the body of `#[tokio::main]` itself):
    /// a completion reaped on a worker wakes another thread.
    UringTokioBlockOn,
    /// `threadpool-tokio`: pagestream's thread-pool engine, the scan in a
    /// task spawned on the same kind of multi-thread tokio runtime.
    ThreadPoolTokio,
    /// Blocking `pread` of one block at a time; the kernel's read-ahead
    /// does the rest (PostgreSQL 16's sequential scan).
    PreadLoop,
    /// Blocking `pread`s with `max_ios` `POSIX_FADV_WILLNEED` hints kept
    /// ahead (PostgreSQL 16's bitmap heap scan).
    FadvisePrefetch,
    /// `tokio::fs::File`, `seek` + `read_exact` per block.
    TokioFs,
    /// glommio's own readers: `DmaStreamReader` for forward scans,
    /// `DmaFile::read_many` for the other patterns (O_DIRECT only).
    GlommioStream,
    /// tokio's own io_uring file I/O (`tokio::fs::File` under tokio 1.54's
    /// unstable `io-uring` feature), `max_ios` tasks reading one block (a
    /// request of a forward scan) each: the separately built
    /// `pagestream-bench-tokio-io-uring` program ([`crate::tokio_io_uring`]).
    TokioIoUring,
    /// tokio-uring used directly: `tokio_uring::fs::File::read_exact_at`
    /// into aligned buffers, `max_ios` tasks on a tokio-uring runtime.
    TokioUringFs,
    /// The floor of a tokio program reading through io_uring: one task
    /// submitting to a ring and awaiting its descriptor in tokio's reactor
    /// ([`baselines::bare_uring_tokio`]).
    BareUringTokio,
    /// The fio binary (io_uring), the device's ceiling.
    Fio,
    /// pagestream, object-store engine: range GETs of an object named by
    /// URL. Not in [`Engine::ALL`] (the engines over local files).
    ObjectStore,
}

impl Engine {
    /// Every engine over local files, pagestream's first
    /// ([`Engine::ObjectStore`], which reads URLs, is not one of them).
    pub const ALL: [Engine; 10] = [
        Engine::ThreadPool,
        Engine::TokioUring,
        Engine::Glommio,
        Engine::Uring,
        Engine::UringTokio,
        Engine::PreadLoop,
        Engine::FadvisePrefetch,
        Engine::TokioFs,
        Engine::GlommioStream,
        Engine::Fio,
    ];

    /// The other engines of the report's io_uring-from-tokio section
    /// (beside [`Engine::UringTokio`], [`Engine::Uring`] and fio): the same
    /// engine polled in `block_on`, the thread pool under tokio,
    /// tokio's and tokio-uring's own file reads, and the floor of reading
    /// through io_uring from tokio's reactor. Not in [`ALL`](Engine::ALL).
    pub const TOKIO: [Engine; 5] = [
        Engine::UringTokioBlockOn,
        Engine::ThreadPoolTokio,
        Engine::TokioIoUring,
        Engine::TokioUringFs,
        Engine::BareUringTokio,
    ];

    /// The engine's command-line name.
    pub const fn name(self) -> &'static str {
        match self {
            Engine::ThreadPool => "threadpool",
            Engine::TokioUring => "tokio-uring",
            Engine::Glommio => "glommio",
            Engine::Uring => "uring",
            Engine::UringTokio => "uring-tokio",
            Engine::UringTokioBlockOn => "uring-tokio-blockon",
            Engine::ThreadPoolTokio => "threadpool-tokio",
            Engine::PreadLoop => "pread-loop",
            Engine::FadvisePrefetch => "fadvise-prefetch",
            Engine::TokioFs => "tokio-fs",
            Engine::GlommioStream => "glommio-stream",
            Engine::TokioIoUring => "tokio-io-uring",
            Engine::TokioUringFs => "tokio-uring-fs",
            Engine::BareUringTokio => "bare-uring-tokio",
            Engine::Fio => "fio",
            Engine::ObjectStore => "object-store",
        }
    }

    /// The pagestream runtime, for pagestream engines.
    pub const fn runtime(self) -> Option<Runtime> {
        match self {
            Engine::ThreadPool => Some(Runtime::ThreadPool),
            Engine::TokioUring => Some(Runtime::TokioUring),
            Engine::Glommio => Some(Runtime::Glommio),
            Engine::Uring => Some(Runtime::Uring),
            Engine::UringTokio | Engine::UringTokioBlockOn => Some(Runtime::UringTokio),
            Engine::ThreadPoolTokio => Some(Runtime::ThreadPool),
            Engine::ObjectStore => Some(Runtime::ObjectStore),
            _ => None,
        }
    }

    /// Whether the scan runs in a task spawned on a multi-thread tokio
    /// runtime ([`Runtime::spawn_with`]) rather than where the runtime
    /// polls it: `uring-tokio` and `threadpool-tokio`.
    pub const fn spawned(self) -> bool {
        matches!(self, Engine::UringTokio | Engine::ThreadPoolTokio)
    }

    /// Whether the engine runs on a multi-thread tokio runtime whose
    /// workers [`ScanConfig::workers`] sets.
    pub const fn on_tokio_workers(self) -> bool {
        matches!(
            self,
            Engine::UringTokio
                | Engine::UringTokioBlockOn
                | Engine::ThreadPoolTokio
                | Engine::TokioIoUring
                | Engine::BareUringTokio
        )
    }

    /// Whether this is the thread-pool engine (under any executor).
    pub const fn is_threadpool(self) -> bool {
        matches!(self, Engine::ThreadPool | Engine::ThreadPoolTokio)
    }

    /// Whether `--nowait` applies: an engine that tries buffered reads
    /// with `RWF_NOWAIT` first.
    pub const fn takes_nowait(self) -> bool {
        self.is_threadpool()
            || matches!(
                self,
                Engine::Uring | Engine::UringTokio | Engine::UringTokioBlockOn
            )
    }

    /// Whether this is pagestream (not a baseline).
    pub const fn is_pagestream(self) -> bool {
        self.runtime().is_some()
    }

    /// Whether this is a reference rather than a reader a user would write:
    /// fio (the device's ceiling) and bare-uring-tokio (the floor of
    /// io_uring through tokio's reactor). Never a row's best baseline.
    pub const fn is_reference(self) -> bool {
        matches!(self, Engine::Fio | Engine::BareUringTokio)
    }

    /// Whether this is a baseline: a reader a user would write instead of
    /// pagestream, which a row's best baseline is chosen from.
    pub const fn is_baseline(self) -> bool {
        !self.is_pagestream() && !self.is_reference()
    }

    /// Whether the engine reads with O_DIRECT only.
    pub const fn direct_only(self) -> bool {
        matches!(self, Engine::Glommio | Engine::GlommioStream)
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Engine {
    type Err = String;

    fn from_str(s: &str) -> Result<Engine, String> {
        Engine::ALL
            .into_iter()
            .chain(Engine::TOKIO)
            .chain([Engine::ObjectStore])
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                format!(
                    "{s:?}: expected threadpool, tokio-uring, glommio, uring, uring-tokio, \
                     uring-tokio-blockon, threadpool-tokio (pagestream) or pread-loop, \
                     fadvise-prefetch, tokio-fs, glommio-stream, tokio-io-uring, tokio-uring-fs, \
                     bare-uring-tokio, fio (baselines), or object-store (an object URL)"
                )
            })
    }
}

pub use crate::cache::Cache;

/// One configuration to measure.
#[derive(Debug, Clone)]
pub struct ScanConfig {
    /// What reads.
    pub engine: Engine,
    /// Which blocks, in which order.
    pub pattern: Pattern,
    /// Where the blocks are beforehand.
    pub cache: Cache,
    /// O_DIRECT (forced on for glommio and glommio-stream).
    pub direct: bool,
    /// Kernel read-ahead: `false` sets `POSIX_FADV_RANDOM` on the file the
    /// engine reads (buffered only).
    pub readahead: bool,
    /// Bytes per block.
    pub block_size: usize,
    /// `io_combine_limit` (fio: blocks per request of a forward scan).
    pub combine: usize,
    /// Reads in flight (fio's iodepth, prefetch distance, glommio's
    /// read-ahead buffers).
    pub max_ios: usize,
    /// pagestream's pool for cold and warm runs (hot: the pattern's blocks).
    pub pool_frames: usize,
    /// pagestream: combine descending runs.
    pub backward_combining: bool,
    /// Seed of `random` and `bitmap`.
    pub seed: u64,
    /// pagestream: start at full distance, no ramp (`StreamBuilder::full`,
    /// PostgreSQL's `READ_STREAM_FULL`).
    pub full: bool,
    /// threadpool: try an inline `RWF_NOWAIT` read first on buffered files
    /// (the engine's default, on).
    pub nowait: bool,
    /// Worker threads of the multi-thread tokio runtime of the engines that
    /// [`Engine::on_tokio_workers`] (default
    /// [`pagestream_runtimes::TOKIO_WORKERS`]).
    pub workers: usize,
    /// uring, uring-tokio: register the pool with the engine's ring as
    /// io_uring fixed buffers (`register_pool`; reads into it are then
    /// `READ_FIXED`s). Off by default.
    pub fixed_buffers: bool,
    /// pagestream: the stream's yield budget (`StreamBuilder::yield_budget`;
    /// default `YieldBudget::Auto`).
    pub yield_budget: YieldBudget,
    /// pagestream: unwanted blocks a read may cover between two wanted
    /// ones (`StreamBuilder::gap_limit`; default 0, off).
    pub gap_limit: usize,
}

/// The file a scan reads.
#[derive(Debug)]
pub struct Target {
    /// Its path (an object's URL).
    pub path: PathBuf,
    /// Whole blocks in it.
    pub nblocks: u64,
    /// A buffered handle for cache control (`None` for an object).
    pub plain: Option<File>,
    /// The block device holding it (`major`, `minor`), if it has one.
    pub dev: Option<(u32, u32)>,
}

impl Target {
    /// Opens `path` (which holds `nblocks` whole blocks).
    pub fn open(path: &Path, nblocks: u64) -> io::Result<Target> {
        use std::os::unix::fs::MetadataExt;
        let plain = File::open(path)?;
        let d = plain.metadata()?.dev();
        // glibc's major() / minor() encoding.
        let major = ((d >> 8) & 0xfff) | ((d >> 32) & !0xfff);
        let minor = (d & 0xff) | ((d >> 12) & !0xff);
        let dev = (major as u32, minor as u32);
        Ok(Target {
            path: path.to_path_buf(),
            nblocks,
            plain: Some(plain),
            dev: DiskSnap::now(dev).map(|_| dev),
        })
    }

    /// Another handle on the same file (its descriptor duplicated), for a
    /// scan that must own its target (a task spawned on tokio).
    pub fn try_clone(&self) -> io::Result<Target> {
        Ok(Target {
            path: self.path.clone(),
            nblocks: self.nblocks,
            plain: self.plain.as_ref().map(File::try_clone).transpose()?,
            dev: self.dev,
        })
    }

    /// The object `url` names (which holds `nblocks` whole blocks): no
    /// handle, no block device.
    pub fn object(url: &str, nblocks: u64) -> Target {
        Target {
            path: PathBuf::from(url),
            nblocks,
            plain: None,
            dev: None,
        }
    }

    /// Prepares the OS page cache for `cache`; returns the fraction of the
    /// file resident. An object has no page cache: 0, for `none` and `hot`
    /// (`cold` and `warm` are errors; [`check`] refuses them).
    pub fn prepare(&self, cache: Cache, direct: bool) -> io::Result<f64> {
        let Some(plain) = &self.plain else {
            return match cache {
                Cache::None | Cache::Hot => Ok(0.0),
                Cache::Cold | Cache::Warm => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: an object has no OS page cache to make {}",
                        self.path.display(),
                        cache.name()
                    ),
                )),
            };
        };
        match cache {
            Cache::Cold => cache::make_cold(plain, &self.path),
            Cache::None => cache::resident_fraction(plain),
            Cache::Warm | Cache::Hot if direct => cache::resident_fraction(plain),
            Cache::Warm | Cache::Hot => cache::make_warm(plain, &self.path),
        }
    }
}

/// Wall-clock and process CPU time (user + system, every thread of this
/// process, from `getrusage(RUSAGE_SELF)`) of a timed section, what the
/// file's block device did meanwhile (`/proc/diskstats`), and the CPU time
/// the hypervisor took from this machine meanwhile (steal, `/proc/stat`).
#[derive(Debug, Clone, Copy)]
pub struct Timer {
    wall: Instant,
    cpu: f64,
    disk: Option<((u32, u32), DiskSnap)>,
    steal: Option<f64>,
}

/// What a timed section took.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    /// Wall-clock seconds.
    pub seconds: f64,
    /// CPU seconds of this process (NaN if unknown).
    pub cpu: f64,
    /// The block device's reads meanwhile.
    pub disk: Option<DiskUse>,
    /// CPU seconds the hypervisor ran something else on this machine's
    /// vCPUs meanwhile (all vCPUs; `None` where `/proc/stat` has no steal).
    pub steal: Option<f64>,
}

/// Read counters of a block device (a line of `/proc/diskstats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSnap {
    reads: u64,
    sectors: u64,
    /// Milliseconds spent on reads (each request from issue to completion).
    read_ms: u64,
    /// Weighted milliseconds doing I/O (the sum over time of requests in
    /// flight).
    weighted_ms: u64,
}

/// What a block device did during a timed section (every process's I/O:
/// measure on a quiet machine).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskUse {
    /// Read requests the device completed.
    pub requests: u64,
    /// Mean KiB per read request.
    pub kib_per_request: f64,
    /// Mean requests in flight at the device (weighted I/O time / wall
    /// time).
    pub queue_depth: f64,
    /// Mean milliseconds a read request took at the device, issue to
    /// completion (the kernel's block-layer time, no syscall or wake-up).
    pub ms_per_request: f64,
}

impl DiskSnap {
    /// The counters of device `major:minor` now.
    pub fn now(dev: (u32, u32)) -> Option<DiskSnap> {
        let text = std::fs::read_to_string("/proc/diskstats").ok()?;
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 14 || f[0].parse() != Ok(dev.0) || f[1].parse() != Ok(dev.1) {
                return None;
            }
            Some(DiskSnap {
                reads: f[3].parse().ok()?,
                sectors: f[5].parse().ok()?,
                read_ms: f[6].parse().ok()?,
                weighted_ms: f[13].parse().ok()?,
            })
        })
    }

    /// From `self` to `later`, over `seconds` of wall time.
    pub fn until(&self, later: &DiskSnap, seconds: f64) -> DiskUse {
        let requests = later.reads.saturating_sub(self.reads);
        let sectors = later.sectors.saturating_sub(self.sectors);
        let ms = later.weighted_ms.saturating_sub(self.weighted_ms);
        let read_ms = later.read_ms.saturating_sub(self.read_ms);
        DiskUse {
            requests,
            ms_per_request: read_ms as f64 / requests.max(1) as f64,
            kib_per_request: sectors as f64 / 2.0 / requests.max(1) as f64,
            queue_depth: if seconds > 0.0 {
                ms as f64 / 1e3 / seconds
            } else {
                0.0
            },
        }
    }
}

/// CPU seconds stolen from this machine by the hypervisor so far, all
/// vCPUs (`/proc/stat`'s `cpu` line, eighth field, in clock ticks). On a
/// shared host a run that loses CPU this way runs slower for reasons that
/// are not its own: the report flags runs with steal.
pub fn steal_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

/// This process's CPU seconds so far (user + system, all threads).
pub fn process_cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the valid pointer given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

impl Timer {
    /// Starts timing a section that reads `target`.
    pub fn start(target: &Target) -> Timer {
        let disk = target.dev.and_then(|d| DiskSnap::now(d).map(|s| (d, s)));
        Timer {
            cpu: process_cpu_seconds(),
            disk,
            steal: steal_seconds(),
            wall: Instant::now(),
        }
    }

    /// What the section took since [`start`](Self::start).
    pub fn stop(&self) -> Timed {
        let seconds = self.wall.elapsed().as_secs_f64();
        let cpu = process_cpu_seconds() - self.cpu;
        let disk = self
            .disk
            .and_then(|(d, before)| DiskSnap::now(d).map(|after| before.until(&after, seconds)));
        let steal = self
            .steal
            .zip(steal_seconds())
            .map(|(before, after)| (after - before).max(0.0));
        Timed {
            seconds,
            cpu,
            disk,
            steal,
        }
    }
}

/// One timed run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The configuration (with `direct` as actually used).
    pub cfg: ScanConfig,
    /// Which repeat.
    pub run: usize,
    /// Pages read.
    pub blocks: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Seconds, first read to last page checksummed.
    pub seconds: f64,
    /// CPU seconds this process used in that time (all threads; fio: its
    /// own `usr_cpu` + `sys_cpu`).
    pub cpu_seconds: Option<f64>,
    /// What the file's block device did meanwhile.
    pub disk: Option<DiskUse>,
    /// CPU seconds the hypervisor stole from the machine meanwhile.
    pub steal_seconds: Option<f64>,
    /// I/O requests (`None` where not measured).
    pub reads: Option<u64>,
    /// Blocks per request.
    pub mean_blocks_per_read: Option<f64>,
    /// Most requests in flight at once (`None` where not measured).
    pub max_in_flight: Option<u64>,
    /// The order-independent checksum (`None` for fio, which hands us no
    /// data).
    pub checksum: Option<u64>,
    /// Fraction of the file in the page cache before the run.
    pub resident_before: f64,
    /// Engine-specific fields.
    pub extra: Map<String, Value>,
}

impl RunResult {
    /// MiB per second.
    pub fn mib_per_s(&self) -> f64 {
        mib_per_s(self.bytes, self.seconds)
    }

    /// Pages per second.
    pub fn pages_per_s(&self) -> f64 {
        self.blocks as f64 / self.seconds
    }

    /// CPU microseconds per I/O request ([`cpu_seconds`](Self::cpu_seconds)
    /// over [`reads`](Self::reads): fio's `total_ios`, pagestream's reads
    /// after combining, one per block or request for the baselines).
    pub fn cpu_us_per_read(&self) -> Option<f64> {
        let reads = self.reads.filter(|&n| n > 0)?;
        self.cpu_seconds.map(|s| s * 1e6 / reads as f64)
    }

    /// CPU microseconds per page (block) read: the same work whatever the
    /// request size.
    pub fn cpu_us_per_page(&self) -> Option<f64> {
        (self.blocks > 0)
            .then_some(())
            .and(self.cpu_seconds)
            .map(|s| s * 1e6 / self.blocks as f64)
    }

    /// The run as a JSON object, with the scan programs' field names.
    pub fn json(&self) -> Value {
        let c = &self.cfg;
        let mut m = Map::new();
        m.insert("engine".into(), json!(c.engine.name()));
        m.insert("pattern".into(), json!(c.pattern.name()));
        m.insert("cache".into(), json!(c.cache.name()));
        m.insert("direct".into(), json!(c.direct));
        m.insert("block_size".into(), json!(c.block_size));
        m.insert("combine".into(), json!(c.combine));
        m.insert("max_ios".into(), json!(c.max_ios));
        m.insert("blocks".into(), json!(self.blocks));
        m.insert("bytes".into(), json!(self.bytes));
        m.insert("seconds".into(), json!(self.seconds));
        m.insert("mib_per_s".into(), json!(self.mib_per_s()));
        m.insert("pages_per_s".into(), json!(self.pages_per_s()));
        m.insert("reads".into(), json!(self.reads));
        m.insert(
            "mean_blocks_per_read".into(),
            json!(self.mean_blocks_per_read),
        );
        m.insert("max_in_flight".into(), json!(self.max_in_flight));
        m.insert("checksum".into(), json!(self.checksum));
        m.insert("run".into(), json!(self.run));
        m.insert("readahead".into(), json!(c.readahead));
        m.insert("seed".into(), json!(c.seed));
        if c.full {
            m.insert("full".into(), json!(true));
        }
        if c.engine.takes_nowait() {
            m.insert("nowait".into(), json!(c.nowait && !c.direct));
        }
        if c.engine.on_tokio_workers() {
            m.insert("workers".into(), json!(c.workers));
            m.insert("fixed_buffers".into(), json!(c.fixed_buffers));
        }
        if c.engine.is_pagestream() {
            m.insert("spawned".into(), json!(c.engine.spawned()));
        }
        m.insert("resident_before".into(), json!(self.resident_before));
        m.insert("cpu_seconds".into(), json!(self.cpu_seconds));
        m.insert("cpu_us_per_read".into(), json!(self.cpu_us_per_read()));
        m.insert("cpu_us_per_page".into(), json!(self.cpu_us_per_page()));
        m.insert("steal_seconds".into(), json!(self.steal_seconds));
        if let Some(d) = self.disk {
            m.insert("device_requests".into(), json!(d.requests));
            m.insert("device_kib_per_request".into(), json!(d.kib_per_request));
            m.insert("device_queue_depth".into(), json!(d.queue_depth));
            m.insert("device_ms_per_request".into(), json!(d.ms_per_request));
        }
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }

    /// A result with the common fields filled from `cfg` and `ck`.
    pub(crate) fn from_checksum(
        cfg: &ScanConfig,
        run: usize,
        ck: Checksum,
        t: Timed,
        resident_before: f64,
    ) -> RunResult {
        RunResult {
            cfg: cfg.clone(),
            run,
            blocks: ck.pages,
            bytes: ck.pages * cfg.block_size as u64,
            seconds: t.seconds,
            cpu_seconds: t.cpu.is_finite().then_some(t.cpu),
            disk: t.disk,
            steal_seconds: t.steal,
            reads: None,
            mean_blocks_per_read: None,
            max_in_flight: None,
            checksum: Some(ck.sum),
            resident_before,
            extra: Map::new(),
        }
    }
}

/// Checks a configuration against what its engine can do; the message names
/// the flag to change.
pub fn check(cfg: &ScanConfig) -> Result<(), String> {
    let e = cfg.engine;
    if e == Engine::ObjectStore {
        if cfg.direct {
            return Err(format!(
                "--direct: {e} reads objects, which are not read through the OS page cache \
                 O_DIRECT bypasses"
            ));
        }
        if matches!(cfg.cache, Cache::Cold | Cache::Warm) {
            return Err(format!(
                "--cache {}: a state of the OS page cache, which {e} does not read through; \
                 use none (every block from the server) or hot (from the pool)",
                cfg.cache.name()
            ));
        }
        if !cfg.readahead {
            return Err(format!(
                "--readahead off: kernel read-ahead is for local files; {e} has none"
            ));
        }
    }
    if cfg.direct && cfg.cache == Cache::Warm {
        return Err("--cache warm means the OS page cache, which --direct bypasses".into());
    }
    if e.direct_only() && cfg.cache == Cache::Warm {
        return Err(format!(
            "--cache warm: {e} reads with O_DIRECT only, which bypasses the OS page cache"
        ));
    }
    if e == Engine::GlommioStream && cfg.cache == Cache::Hot {
        return Err(
            "--cache hot: glommio-stream has no cache of its own and reads with O_DIRECT \
                    only; hot does not apply"
                .into(),
        );
    }
    if e == Engine::Fio && cfg.direct && cfg.cache == Cache::Hot {
        return Err("--cache hot: fio with --direct has no cache; hot does not apply".into());
    }
    if e == Engine::Fio && matches!(cfg.pattern, Pattern::Backward | Pattern::Bitmap(_)) {
        return Err(format!(
            "--pattern {}: fio has no equivalent (it reads forward or at random)",
            cfg.pattern
        ));
    }
    if e == Engine::TokioFs && cfg.direct {
        return Err(
            "--direct: tokio::fs::File reads through its own unaligned buffer, \
                    which O_DIRECT refuses"
                .into(),
        );
    }
    if cfg.combine == 0 || cfg.combine > pagestream::MAX_IO_COMBINE_LIMIT {
        return Err(format!(
            "--combine must be 1 to {}",
            pagestream::MAX_IO_COMBINE_LIMIT
        ));
    }
    if cfg.max_ios > pagestream::MAX_IOS {
        return Err(format!("--max-ios must be at most {}", pagestream::MAX_IOS));
    }
    if cfg.full && !e.is_pagestream() {
        return Err(format!(
            "--full: a pagestream stream option; {e} has no ramp to skip"
        ));
    }
    if !cfg.nowait && !e.takes_nowait() {
        return Err(format!(
            "--nowait: an option of the threadpool, uring and uring-tokio engines, not of {e}"
        ));
    }
    if matches!(
        e,
        Engine::TokioIoUring | Engine::TokioUringFs | Engine::BareUringTokio
    ) && cfg.direct
        && cfg.cache == Cache::Hot
    {
        return Err(format!(
            "--cache hot: {e} has no cache of its own and --direct bypasses the OS page cache; \
             hot does not apply"
        ));
    }
    if cfg.workers == 0 {
        return Err("--workers must be at least 1".into());
    }
    if cfg.pool_frames == 0 {
        return Err("--pool-frames must be at least 1".into());
    }
    Ok(())
}

/// Runs one configuration once over `target` (`blocks` is the pattern's
/// block list) and returns the timed run. The configuration must pass
/// [`check`]; glommio engines are switched to O_DIRECT here.
pub fn run_scan(
    cfg: &ScanConfig,
    target: &Target,
    blocks: &[u64],
    run: usize,
) -> io::Result<RunResult> {
    let mut cfg = cfg.clone();
    if cfg.engine.direct_only() {
        cfg.direct = true;
    }
    check(&cfg).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    match cfg.engine.runtime() {
        Some(rt) => {
            let options = pagestream_runtimes::Options::default()
                .nowait(cfg.nowait)
                .workers(cfg.workers);
            let scan = StreamScan {
                target: target.try_clone()?,
                blocks: blocks.to_vec(),
                run,
                cfg,
            };
            if scan.cfg.engine.spawned() {
                rt.spawn_with(&options, scan)?
            } else {
                rt.run_with(&options, scan)?
            }
        }
        None => match cfg.engine {
            Engine::PreadLoop => baselines::pread_loop(&cfg, target, blocks, run, 0),
            Engine::FadvisePrefetch => {
                baselines::pread_loop(&cfg, target, blocks, run, cfg.max_ios)
            }
            Engine::TokioFs => baselines::tokio_fs(&cfg, target, blocks, run),
            Engine::GlommioStream => baselines::glommio_stream(&cfg, target, blocks, run),
            Engine::TokioUringFs => baselines::tokio_uring_fs(&cfg, target, blocks, run),
            Engine::BareUringTokio => baselines::bare_uring_tokio(&cfg, target, blocks, run),
            Engine::TokioIoUring => tokio_io_uring::run(&cfg, target, blocks, run),
            Engine::Fio => fio::run(&cfg, target, run),
            _ => unreachable!("pagestream engines have a runtime"),
        },
    }
}

/// How a scan opens its files: through [`Env::open`] where the runtime
/// polls the workload itself ([`Workload`]), through
/// [`Env::open_blocking`] in a task spawned on a multi-thread runtime
/// ([`SpawnWorkload`]), whose future must be `Send`, which `Env::open`'s
/// is not known to be. The two are the same on the runtimes that spawn.
trait Open<E: Env> {
    fn open(env: &E, path: &Path, opts: FileOptions) -> impl Future<Output = io::Result<E::File>>;
}

/// [`Env::open`].
struct AsyncOpen;

impl<E: Env> Open<E> for AsyncOpen {
    fn open(env: &E, path: &Path, opts: FileOptions) -> impl Future<Output = io::Result<E::File>> {
        env.open(path, opts)
    }
}

/// [`Env::open_blocking`], as a ready future.
struct BlockingOpen;

impl<E: Env> Open<E> for BlockingOpen {
    fn open(env: &E, path: &Path, opts: FileOptions) -> impl Future<Output = io::Result<E::File>> {
        std::future::ready(env.open_blocking(path, opts))
    }
}

/// A pagestream scan as a workload for `pagestream-runtimes`: polled where
/// the runtime polls it ([`Workload`]), or in a task spawned on the
/// runtime's workers ([`SpawnWorkload`], the engines that
/// [`Engine::spawned`]); it owns what it reads, as a spawned task must.
struct StreamScan {
    cfg: ScanConfig,
    target: Target,
    blocks: Vec<u64>,
    run: usize,
}

impl StreamScan {
    /// Opens the file for `env`'s engine; with read-ahead off (buffered)
    /// the file gets `POSIX_FADV_RANDOM` and its engine knows the kernel
    /// will not read ahead: the thread pool's file is opened with that
    /// advice, the io_uring runtimes' is turned off after opening
    /// (`UringFile::disable_readahead`).
    async fn open<E: Env, O: Open<E>>(&self, env: &E) -> io::Result<E::File> {
        let c = &self.cfg;
        let opts = FileOptions {
            direct: c.direct,
            block_size: c.block_size,
        };
        if c.readahead || c.direct {
            return O::open(env, &self.target.path, opts).await;
        }
        // pagestream-runtimes has no way to pass open advice, so the
        // concrete file types are reached through `Any`.
        match env.runtime() {
            Runtime::ThreadPool => {
                let f = pagestream_threadpool::ThreadPoolFile::open_with(
                    &self.target.path,
                    pagestream_threadpool::OpenOptions::new()
                        .block_size(c.block_size)
                        .advice(pagestream_threadpool::FileAdvice::Random),
                )?;
                // `E::File` is `ThreadPoolFile` on the thread-pool runtime.
                let boxed: Box<dyn std::any::Any> = Box::new(f);
                boxed
                    .downcast::<E::File>()
                    .map(|b| *b)
                    .map_err(|_| io::Error::other("the thread-pool runtime's file type changed"))
            }
            Runtime::TokioUring | Runtime::Uring | Runtime::UringTokio => {
                // The io_uring runtimes read `pagestream_uring::UringFile`s
                // (tokio-uring's `TokioUringFile` is the same type).
                let f = O::open(env, &self.target.path, opts).await?;
                let any: &dyn std::any::Any = &f;
                any.downcast_ref::<pagestream_uring::UringFile>()
                    .ok_or_else(|| io::Error::other("the io_uring runtimes' file type changed"))?
                    .disable_readahead()?;
                Ok(f)
            }
            rt => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("--readahead off is not available for {rt}"),
            )),
        }
    }

    /// Starts the engine outside the timing (the thread pool starts its I/O
    /// threads on demand): reads the first `max_ios` blocks, one block per
    /// read, through a separate small pool. The cache is prepared after
    /// this, so what it read does not help the timed pass.
    async fn warm_up<E: Env, O: Open<E>>(&self, env: &E) -> io::Result<()> {
        let c = &self.cfg;
        let n = (c.max_ios.max(1) as u64).min(self.target.nblocks);
        let pool = BufferPool::new(n as usize + 1, c.block_size).map_err(io::Error::from)?;
        let file = self.open::<E, O>(env).await?;
        let mut stream = ReadStream::builder(&pool, env.engine(), file)
            .max_ios(c.max_ios)
            .io_combine_limit(1)
            .build(source::forward(0..n))
            .map_err(io::Error::from)?;
        while let Some(page) = stream.next().await {
            page?;
        }
        stream.close().await;
        Ok(())
    }

    /// One pass over the pattern with a stream on `pool`.
    async fn pass<E: Env, O: Open<E>>(
        &self,
        env: &E,
        pool: &BufferPool,
        ring: Option<RingSize>,
    ) -> io::Result<Pass> {
        let file = self.open::<E, O>(env).await?;
        let n = self.target.nblocks;
        match self.cfg.pattern {
            Pattern::Forward => {
                self.drive(env, pool, file, ring, source::forward(0..n))
                    .await
            }
            Pattern::Backward => {
                self.drive(env, pool, file, ring, source::backward(0..n))
                    .await
            }
            Pattern::Random | Pattern::Bitmap(_) => {
                let list = self.blocks.clone();
                self.drive(env, pool, file, ring, source::iter(list)).await
            }
        }
    }

    async fn drive<E: Env, S: BlockSource>(
        &self,
        env: &E,
        pool: &BufferPool,
        file: E::File,
        ring: Option<RingSize>,
        src: S,
    ) -> io::Result<Pass> {
        let c = &self.cfg;
        let mut stream = ReadStream::builder(pool, env.engine(), file)
            .max_ios(c.max_ios)
            .io_combine_limit(c.combine)
            .ring(ring)
            .backward_combining(c.backward_combining)
            .full(c.full)
            .yield_budget(c.yield_budget)
            .gap_limit(c.gap_limit)
            .build(src)
            .map_err(io::Error::from)?;
        let timer = Timer::start(&self.target);
        let mut ck = Checksum::default();
        // Reads in flight sampled at every page handed out (a counter read).
        let mut in_flight_sum = 0u64;
        while let Some(page) = stream.next().await {
            let page = page?;
            in_flight_sum += stream.reads_in_flight() as u64;
            ck.add(page.block(), &page);
        }
        let timed = timer.stop();
        let mean_in_flight = in_flight_sum as f64 / ck.pages.max(1) as f64;
        let yield_budget = stream.yield_budget();
        Ok(Pass {
            ck,
            timed,
            stats: stream.close().await,
            mean_in_flight,
            yield_budget,
        })
    }

    /// The whole run: pool, warm-up, cache preparation, the timed pass.
    async fn scan<E: Env, O: Open<E>>(&self, env: &E) -> io::Result<RunResult> {
        let c = &self.cfg;
        let (pool, ring) = match c.cache {
            Cache::Hot => {
                let frames = self.blocks.len().max(1);
                let pool = BufferPool::new(frames, c.block_size).map_err(io::Error::from)?;
                let fill = self.pass::<E, O>(env, &pool, None).await?;
                if fill.stats.pages != self.blocks.len() as u64 {
                    return Err(io::Error::other("the hot pool's filling scan ended early"));
                }
                (pool, None)
            }
            _ => {
                // PostgreSQL's BULKREAD ring for a file larger than a
                // quarter of the pool, as seqscan does, whatever the
                // pattern: every pattern reads each block once. Random
                // O_DIRECT reads into a ring ran 4–14% faster than into a
                // whole pool of 1024 frames (docs/engines.md).
                let ring =
                    (self.target.nblocks > c.pool_frames as u64 / 4).then_some(RingSize::BULKREAD);
                // Without a ring the pass may fill any frame: map them all
                // now. A ring recycles a few frames, which its first lap
                // maps.
                let pool = BufferPool::builder()
                    .frames(c.pool_frames)
                    .block_size(c.block_size)
                    .prefault(ring.is_none())
                    .build()
                    .map_err(io::Error::from)?;
                (pool, ring)
            }
        };
        if c.fixed_buffers {
            env.register_pool(&pool)?;
        }
        let touched = match (c.cache, ring) {
            (Cache::Hot, _) | (_, Some(_)) => 0,
            _ => pool.frames() as u64,
        };
        self.warm_up::<E, O>(env).await?;
        let resident = self.target.prepare(c.cache, c.direct)?;
        let before = env.engine_counters();
        let Pass {
            ck,
            timed,
            stats: st,
            mean_in_flight,
            yield_budget,
        } = self.pass::<E, O>(env, &pool, ring).await?;
        let engine = env.engine_counters().since(&before);
        if c.cache == Cache::Hot && st.blocks_read != 0 {
            return Err(io::Error::other(format!(
                "hot scan read {} blocks: the pool did not keep the pattern's blocks",
                st.blocks_read
            )));
        }
        let mut r = RunResult::from_checksum(c, self.run, ck, timed, resident);
        r.reads = Some(st.reads);
        r.mean_blocks_per_read = Some(st.mean_blocks_per_read());
        r.max_in_flight = Some(st.max_in_flight);
        let x = &mut r.extra;
        x.insert("hits".into(), json!(st.hits));
        x.insert("waits".into(), json!(st.waits));
        x.insert("wait_seconds".into(), json!(st.wait_time.as_secs_f64()));
        x.insert("advice".into(), json!(st.advice));
        x.insert("mean_in_flight".into(), json!(mean_in_flight));
        x.insert("mean_distance".into(), json!(st.mean_distance()));
        x.insert("mean_pinned".into(), json!(st.mean_pinned()));
        x.insert("max_distance".into(), json!(st.max_distance));
        x.insert(
            "limited_by".into(),
            json!({
                "distance": st.limited_by_distance,
                "max_ios": st.limited_by_max_ios,
                "pin_budget": st.limited_by_pin_budget,
                "frames": st.limited_by_frames,
            }),
        );
        x.insert("cached_reads".into(), json!(st.cached_reads));
        x.insert("budget_yields".into(), json!(st.budget_yields));
        x.insert(
            "yield_budget".into(),
            json!(crate::args::format_budget(yield_budget)),
        );
        x.insert("backward_reads".into(), json!(st.backward_reads));
        x.insert("gap_limit".into(), json!(c.gap_limit));
        x.insert("gap_blocks".into(), json!(st.gap_blocks));
        x.insert("pool_frames".into(), json!(pool.frames()));
        x.insert("pool_touched_frames".into(), json!(touched));
        // The engine's own counters (`engine_<name>`; durations in seconds).
        for &(name, v) in &engine.0 {
            match name.strip_suffix("_nanos") {
                Some(stem) => x.insert(format!("engine_{stem}_seconds"), json!(v as f64 / 1e9)),
                None => x.insert(format!("engine_{name}"), json!(v)),
            };
        }
        x.insert("ring".into(), json!(ring.is_some()));
        Ok(r)
    }
}

/// What one pass of a stream gave.
struct Pass {
    ck: Checksum,
    timed: Timed,
    stats: StreamStats,
    /// Mean reads in flight, sampled per page.
    mean_in_flight: f64,
    /// The stream's yield budget, as its first poll chose it.
    yield_budget: YieldBudget,
}

impl Workload for StreamScan {
    type Output = io::Result<RunResult>;

    async fn run<E: Env>(self, env: E) -> io::Result<RunResult> {
        self.scan::<E, AsyncOpen>(&env).await
    }
}

impl SpawnWorkload for StreamScan {
    type Output = io::Result<RunResult>;

    async fn run<E: SendEnv>(self, env: E) -> io::Result<RunResult> {
        self.scan::<E, BlockingOpen>(&env).await
    }
}
