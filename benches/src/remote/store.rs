//! `remote --store URL` and `remote --serve nginx|moto`: scans of an object
//! on a real server through the object-store engine
//! ([`pagestream_object_store`]), with object_store's
//! [`ThrottledStore`] making the server behave like an object store: a
//! fixed latency before every GET (`--latency-ms`, default 20) and a
//! bandwidth for each GET's body (`--request-mib-per-s`, default 60: one S3
//! connection streams at 25–95 MiB/s, so bandwidth comes from requests in
//! parallel).
//!
//! ```text
//! cargo run --release --bin remote -- --serve nginx [--object-size 256MiB]
//! cargo run --release --bin remote -- --store http://host/path/table.dat
//! AWS_ENDPOINT=http://127.0.0.1:9000 AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… \
//!     AWS_ALLOW_HTTP=true cargo run --release --bin remote -- --store s3://bucket/table.dat
//! ```
//!
//! # The object
//!
//! `--serve nginx` starts nginx on a free loopback port serving
//! `target/pagestream-data/` (through the engine's test harness,
//! [`Nginx`]) and scans the stamped file `seqscan-<size>.dat` there,
//! created if absent; `--serve moto` starts moto's S3 server ([`Moto`]),
//! creates a bucket and uploads that file into it. Either way the pages'
//! checksums are known from the local file and every run is checked
//! against them. `--store URL` scans an object that exists already: any
//! file of whole 8 KiB pages, e.g. one of the stamped files
//! (`cargo run --release --bin seqscan -- --size 256MiB` creates
//! `target/pagestream-data/seqscan-256MiB.dat`), copied to the server
//! (`aws s3 cp FILE s3://bucket/key`, or into a directory nginx serves);
//! the runs are then checked against each other.
//!
//! # Rows
//!
//! All over the same object, every configuration run `--repeat` times,
//! interleaved (one run of each, the first rotating with the repeat):
//!
//! - `server-curl`, `server-curl-ranges`, `server-range-gets`: the
//!   server's own ceiling, unthrottled: `curl` of the whole object to
//!   `/dev/null`; one `curl --parallel` of N range GETs (N: the engine's
//!   default GETs in flight, the object split evenly), timed by curl (the
//!   longest transfer, so curl's start-up is not counted); and the same N
//!   range GETs through object_store's `get_range` (reqwest), each a task
//!   on the tokio runtime the engine uses. The curl of the ranges is one
//!   curl per CPU (one curl is one thread), timed by curl: the latest end
//!   of a transfer from when the first curl started. Always measured. The
//!   server's bandwidth `S` the ideal uses is the best median of these and
//!   of the `unthrottled` row: the most any reader got from the server
//!   unthrottled in the run (the server rows' clients, not the server, may
//!   be what limits them).
//! - `throttle`: one GET of the engine's default request size through the
//!   throttled store: what the harness adds to the configured latency and
//!   bandwidth (tokio's timer rounds each sleep up to the millisecond,
//!   and `ThrottledStore` sleeps once per body chunk). Always measured.
//!   Under the throttle, [`Rechunk`] hands it bodies in chunks of at least
//!   `--throttle-chunk` (default 1 MiB) so that it sleeps 16 ms or more
//!   each time: in hyper's chunks (often tens of KiB) the rounding alone
//!   took a fifth of a GET's bandwidth.
//! - `unthrottled` (`--rows ceiling`): pagestream's sequential scan with
//!   the engine's defaults and no throttle; `vs_best` is its MiB/s over the
//!   best of the three server rows (`server_rows_mib_per_s`).
//! - `per-page`: one GET per page, serially (what a reader without
//!   look-ahead does). At 20 ms a page, a 256 MiB object would take 11
//!   minutes: the row reads a prefix of the block list
//!   (`--per-page-pages`, default 128) and its rate is compared.
//! - `get-ranges`: the anchor: object_store's `get_ranges` over the pages'
//!   ranges, all in one call (ranges within 1 MiB merged into one GET, 10
//!   GETs at a time). `ThrottledStore` overrides `get_ranges` with a single
//!   sleep for the whole call before the inner store's own (unthrottled)
//!   `get_ranges`, which would charge every merged GET neither the latency
//!   nor the bandwidth; so the row calls what the trait's default
//!   `get_ranges` calls, `object_store::coalesce_ranges` with
//!   `OBJECT_STORE_COALESCE_DEFAULT`, over the throttled store's
//!   `get_range`, and every merged GET pays both.
//! - `pagestream`: a stream with the engine's defaults
//!   ([`DEFAULT_READ_BYTES`] per GET, [`DEFAULT_READS_IN_FLIGHT`] GETs in
//!   flight, all sent at once: the engine's full look-ahead);
//!   `pagestream-ramp`: the same with PostgreSQL's ramp from one page
//!   (`ObjectStoreEngineBuilder::full_look_ahead(false)`), which shows
//!   what the ramp costs at this latency.
//! - `grid`: the sequential scan at every request size of `--read-sizes`
//!   × GETs in flight of `--in-flight`: the table the defaults are chosen
//!   from.
//! - `pool64`: the defaults on a 64 MiB pool, too small for 64 GETs of
//!   4 MiB: reads shrink before they get fewer (`mean_request_kib`,
//!   `max_in_flight`).
//! - `sync-on`: `--scans` scans of the whole object, each started when the
//!   previous has returned 10% of it, synchronized ([`SyncScans`], the
//!   consumers reporting); `parallel`: `--workers` streams over one
//!   [`ParallelScan`].
//! - `hedge-on`, `hedge-off`: the defaults over [`Stalling`] wrapping the
//!   throttled store, every `--stall-every`-th GET (default 20) held
//!   `--stall-ms` (default 2000) before it is sent; with the engine's
//!   hedging ([`Hedging::default`]) and without. `vs_unstalled`: time
//!   over the `pagestream` sequential row's.
//!
//! Patterns: `sequential` (every page) for every row; `bitmap:D` (D =
//! `--density`, default 0.01: that fraction of the pages, seeded, in
//! ascending order, as a bitmap heap scan reads them) for `per-page`,
//! `get-ranges` and `pagestream`.
//!
//! Every stream row uses one pool (`--pool-frames`; by default enough for
//! the grid's largest request size × most GETs in flight, at most 2 GiB),
//! its memory touched once before the first run; the object's pages are
//! dropped from it after every run, so every run starts cold.
//!
//! # The ideal
//!
//! From the configuration only — latency `L`, the per-byte wait `w` of the
//! throttle (`--request-mib-per-s` as the whole nanoseconds
//! `ThrottleConfig` holds: 60 MiB/s is 16 ns a byte, 59.6 MiB/s), each
//! row's requests and GETs in flight, the pool, and the server's bandwidth
//! `S` measured in the same run, unthrottled — never from what the row
//! achieved ([`ideal_seconds`]):
//!
//! ```text
//! a request of q bytes   t(q) = L + q × (w + k / S)    k = min(slots, requests)
//! the row                its requests, in order, each on the lane (of
//!                        `slots`) that frees first; equal ones: ⌈n / k⌉ × t(q)
//! ```
//!
//! A request takes the latency, its bytes at the throttle's per-byte wait,
//! and its bytes at its share of the server (`S` over the `k` requests in
//! flight): `ThrottledStore` sleeps after each body chunk has arrived, so
//! its waits add to the transfer rather than overlap it ("additive", its
//! documentation says). Measured: with 64 GETs of 4 MiB in flight, latency
//! alone cost the sequential scan nothing beside the server's bandwidth,
//! the per-byte wait alone half of it. `overlap_seconds` (and `x_overlap`)
//! is the bound if the waits did overlap: each request `L + w × q`, all
//! the bytes at least `bytes / S` ([`overlap_seconds`]).
//!
//! The requests of a row: one page each, one lane (`per-page`); the merged
//! ranges, 10 GETs in flight in order (`get-ranges`: futures' `buffered`,
//! so a long merged GET holds the window, [`ideal_seconds_in_order`]); runs
//! of consecutive pages of the block list cut at the request size, one lane
//! per GET in flight (streams, [`stream_requests`]). A pool too small for
//! that many full-sized requests gets smaller ones, as many
//! ([`pool_shape`]). Parallel workers and synchronized scans have the lanes
//! of all their streams; the scans read the object once when the pool holds
//! it (else the re-reads of `remote`'s simulated `sync-on` row). The ideal
//! ignores the look-ahead ramp, the CPU and the harness's timer rounding
//! (the `throttle` row shows that); `x_ideal` is the row's time over it.
//!
//! # Output
//!
//! A table, or with `--json` one object per row: `row`, `reader`,
//! `pattern`, `read_bytes`, `reads_in_flight`, `streams`, `pages`,
//! `seconds` (median) with `seconds_min`/`seconds_max`, `mib_per_s` (pages
//! returned × 8 KiB over the median time) with `mib_per_s_min`/`_max`,
//! `vs_anchor` (MiB/s over the `get-ranges` row's of the same pattern),
//! `vs_per_page` (over the `per-page` row's),
//! `ideal_seconds`, `ideal_mib_per_s`, `x_ideal`, `server_mib_per_s`,
//! `gets`, `hedged`, `hedge_won`, `stalled`, `reads`, `mean_request_kib`,
//! `max_in_flight`, `limit`, and more. Counters come from the run with the
//! median time.

use super::{drive, limit_name, Cli, Exec, Source, BLOCK_SIZE, MAX_POOL_FRAMES};
use crate::args::{self, format_size, List, UsageError};
use crate::checksum::Checksum;
use crate::data;
use crate::pattern::Pattern;
use crate::timing::{mib_per_s, JsonObject, Spread};
use pagestream::source::{self, ParallelScan, SyncScans};
use pagestream::{BufferPool, EngineFile, ReadStream, StreamStats};
use pagestream_object_store::object_store::{
    self,
    aws::AmazonS3Builder,
    http::HttpBuilder,
    path::Path as ObjectPath,
    throttle::{ThrottleConfig, ThrottledStore},
    ClientOptions, ObjectStore, ObjectStoreExt,
};
use pagestream_object_store::testing::{Moto, Nginx, Stalling};
use pagestream_object_store::{
    Hedging, ObjectFile, ObjectStoreEngine, DEFAULT_READS_IN_FLIGHT, DEFAULT_READ_BYTES,
};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt::Write as _;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// object_store's `get_ranges` sends at most this many GETs at once
/// (`OBJECT_STORE_COALESCE_PARALLEL`, private to object_store).
pub(crate) const GET_RANGES_PARALLEL: usize = 10;

/// The `pool64` row's pool.
const POOL64_FRAMES: usize = (64 << 20) / BLOCK_SIZE;

/// The largest request size of the grid: `MAX_IO_COMBINE_LIMIT` pages.
const MAX_READ_BYTES: u64 = (pagestream::MAX_IO_COMBINE_LIMIT * BLOCK_SIZE) as u64;

/// The bucket `--serve moto` uploads into.
const MOTO_BUCKET: &str = "pagestream-bench";

/// A server `--serve` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Serve {
    Nginx,
    Moto,
}

/// The store options as clap reads them (flattened into `remote`'s).
#[derive(Debug, Clone, clap::Args)]
pub(super) struct StoreArgs {
    #[arg(long, value_parser = parse_url)]
    store: Option<String>,
    #[arg(long, value_parser = |s: &str| match s {
        "nginx" => Ok(Serve::Nginx),
        "moto" => Ok(Serve::Moto),
        _ => Err(format!("{s:?}: expected nginx or moto")),
    })]
    serve: Option<Serve>,
    #[arg(long = "object-size", value_parser = args::parse_size)]
    object_size: Option<u64>,
    #[arg(long = "request-mib-per-s", value_parser = parse_mib_per_s)]
    request_mib_per_s: Option<f64>,
    #[arg(long = "read-sizes", value_parser = parse_read_sizes)]
    read_sizes: Option<List<u64>>,
    #[arg(long = "in-flight", value_parser = parse_in_flight)]
    in_flight: Option<List<usize>>,
    #[arg(long = "per-page-pages", value_parser = args::number::<u64>)]
    per_page_pages: Option<u64>,
    #[arg(long, value_parser = parse_density)]
    density: Option<f64>,
    #[arg(long = "stall-every", value_parser = args::number::<u64>)]
    stall_every: Option<u64>,
    #[arg(long = "stall-ms", value_parser = parse_stall)]
    stall: Option<Duration>,
    #[arg(long = "throttle-chunk", value_parser = parse_throttle_chunk)]
    throttle_chunk: Option<u64>,
}

impl StoreArgs {
    /// Whether the command line asks for a store.
    pub(super) fn given(&self) -> bool {
        self.store.is_some() || self.serve.is_some()
    }

    /// The first store option given, for the message that it needs a store.
    pub(super) fn first_given(&self) -> Option<&'static str> {
        [
            ("--object-size", self.object_size.is_some()),
            ("--request-mib-per-s", self.request_mib_per_s.is_some()),
            ("--read-sizes", self.read_sizes.is_some()),
            ("--in-flight", self.in_flight.is_some()),
            ("--per-page-pages", self.per_page_pages.is_some()),
            ("--density", self.density.is_some()),
            ("--stall-every", self.stall_every.is_some()),
            ("--stall-ms", self.stall.is_some()),
            ("--throttle-chunk", self.throttle_chunk.is_some()),
        ]
        .into_iter()
        .find(|f| f.1)
        .map(|f| f.0)
    }
}

fn parse_url(s: &str) -> Result<String, String> {
    if pagestream_object_store::is_object_url(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?}: expected an object URL, s3://bucket/key or http(s)://host/path"
        ))
    }
}

fn parse_mib_per_s(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e6).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?}: expected MiB/s per GET, 0 (no limit) to 1000000"
        )),
    }
}

fn parse_read_sizes(s: &str) -> Result<List<u64>, String> {
    s.split(',')
        .map(|p| {
            let v = args::parse_size(p)?;
            if v == 0 || v % BLOCK_SIZE as u64 != 0 || v > MAX_READ_BYTES {
                Err(format!(
                    "{p:?}: a request size must be a positive multiple of 8KiB, at most {}",
                    format_size(MAX_READ_BYTES)
                ))
            } else {
                Ok(v)
            }
        })
        .collect()
}

fn parse_in_flight(s: &str) -> Result<List<usize>, String> {
    s.split(',')
        .map(|p| match p.trim().parse::<usize>() {
            Ok(n) if (1..=pagestream::MAX_IOS).contains(&n) => Ok(n),
            _ => Err(format!(
                "{p:?}: GETs in flight must be 1 to {}",
                pagestream::MAX_IOS
            )),
        })
        .collect()
}

fn parse_density(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(d) if d > 0.0 && d <= 1.0 => Ok(d),
        _ => Err(format!("{s:?}: expected a fraction above 0 and at most 1")),
    }
}

fn parse_throttle_chunk(s: &str) -> Result<u64, String> {
    let v = args::parse_size(s)?;
    if v > 64 << 20 {
        return Err(format!("{s:?}: at most 64MiB (0: the server's chunks)"));
    }
    Ok(v)
}

fn parse_stall(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(ms) if ms.is_finite() && ms > 0.0 && ms <= 600_000.0 => {
            Ok(Duration::from_secs_f64(ms / 1e3))
        }
        _ => Err(format!(
            "{s:?}: expected milliseconds, above 0 and at most 600000"
        )),
    }
}

/// The object to scan.
#[derive(Debug, Clone)]
enum TargetSpec {
    /// An existing object.
    Url(String),
    /// A stamped object of this size on a server `remote` starts.
    Serve(Serve, u64),
}

/// The rows of a store run, in the order they print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StoreRow {
    PerPage,
    GetRanges,
    Pagestream,
    Grid,
    Pool64,
    SyncOn,
    Parallel,
    Hedge,
    Ceiling,
}

impl StoreRow {
    const ALL: [StoreRow; 9] = [
        StoreRow::PerPage,
        StoreRow::GetRanges,
        StoreRow::Pagestream,
        StoreRow::Grid,
        StoreRow::Pool64,
        StoreRow::SyncOn,
        StoreRow::Parallel,
        StoreRow::Hedge,
        StoreRow::Ceiling,
    ];

    fn name(self) -> &'static str {
        match self {
            StoreRow::PerPage => "per-page",
            StoreRow::GetRanges => "get-ranges",
            StoreRow::Pagestream => "pagestream",
            StoreRow::Grid => "grid",
            StoreRow::Pool64 => "pool64",
            StoreRow::SyncOn => "sync-on",
            StoreRow::Parallel => "parallel",
            StoreRow::Hedge => "hedge",
            StoreRow::Ceiling => "ceiling",
        }
    }

    fn parse_list(s: &str) -> Result<Vec<StoreRow>, String> {
        let mut rows = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part == "all" {
                rows.extend(StoreRow::ALL);
                continue;
            }
            let row = StoreRow::ALL
                .into_iter()
                .find(|r| r.name() == part)
                .ok_or_else(|| {
                    format!(
                        "{part:?} is not a row of a store run (per-page, get-ranges, pagestream, \
                         grid, pool64, sync-on, parallel, hedge, ceiling, all)"
                    )
                })?;
            rows.push(row);
        }
        Ok(StoreRow::ALL
            .into_iter()
            .filter(|r| rows.contains(r))
            .collect())
    }
}

/// A store run's options, checked.
#[derive(Debug, Clone)]
pub(crate) struct StoreOpts {
    target: TargetSpec,
    latency: Duration,
    /// `ThrottleConfig::wait_get_per_byte` (zero: no bandwidth limit).
    per_byte: Duration,
    request_mib_per_s: f64,
    pool_frames: usize,
    read_sizes: Vec<u64>,
    in_flight: Vec<usize>,
    per_page_pages: u64,
    density: f64,
    stall_every: u64,
    stall: Duration,
    /// [`Rechunk`]'s chunk under the throttle (0: none).
    throttle_chunk: u64,
    scans: usize,
    workers: usize,
    rows: Vec<StoreRow>,
    repeat: usize,
    pub(super) json: bool,
    verbose: bool,
    full: bool,
}

/// The checks of a store run's command line.
pub(super) fn check(c: Cli) -> Result<StoreOpts, UsageError> {
    let bad = |m: String| Err(UsageError(m));
    let s = c.store;
    let target =
        match (s.store, s.serve) {
            (Some(_), Some(_)) => return bad(
                "--store and --serve are exclusive: scan an existing object, or one on a server \
                 remote starts"
                    .into(),
            ),
            (Some(url), None) => {
                if s.object_size.is_some() {
                    return bad(
                        "--object-size applies to --serve (an existing object has its size)".into(),
                    );
                }
                TargetSpec::Url(url)
            }
            (None, Some(kind)) => {
                let size = s.object_size.unwrap_or(256 << 20);
                if size == 0 || size % BLOCK_SIZE as u64 != 0 || size > 64 << 30 {
                    return bad(format!(
                        "--object-size {size} must be a positive multiple of 8KiB, at most 64GiB"
                    ));
                }
                TargetSpec::Serve(kind, size)
            }
            (None, None) => unreachable!("check is called with a store"),
        };
    let read_sizes = s
        .read_sizes
        .unwrap_or_else(|| vec![256 << 10, 1 << 20, 4 << 20, 16 << 20]);
    let in_flight = s.in_flight.unwrap_or_else(|| vec![4, 16, 64, 128]);
    let pool_frames = match c.pool_frames {
        Some(f) if f == 0 || f > MAX_POOL_FRAMES => {
            return bad(format!("--pool-frames {f} must be 1 to {MAX_POOL_FRAMES}"))
        }
        Some(f) => f,
        None => default_pool_frames(&read_sizes, &in_flight),
    };
    let request_mib_per_s = s.request_mib_per_s.unwrap_or(60.0);
    let per_byte = if request_mib_per_s == 0.0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(1.0 / (request_mib_per_s * (1u64 << 20) as f64))
    };
    if request_mib_per_s != 0.0 && per_byte.is_zero() {
        return bad(format!(
            "--request-mib-per-s {request_mib_per_s} is below a nanosecond per byte, the \
             throttle's resolution: use 0 for no limit"
        ));
    }
    let per_page_pages = s.per_page_pages.unwrap_or(128);
    if per_page_pages == 0 {
        return bad("--per-page-pages must be at least 1".into());
    }
    let stall_every = s.stall_every.unwrap_or(20);
    if stall_every == 0 {
        return bad("--stall-every must be at least 1".into());
    }
    if c.scans == 0 || c.scans > 10 {
        return bad(format!(
            "--scans {} must be 1 to 10 (each starts 10% of the object after the previous)",
            c.scans
        ));
    }
    if c.workers == 0 || c.workers > 64 {
        return bad(format!("--workers {} must be 1 to 64", c.workers));
    }
    if c.repeat == 0 {
        return bad("--repeat must be at least 1".into());
    }
    let rows = StoreRow::parse_list(&c.rows).map_err(|e| UsageError(format!("--rows: {e}")))?;
    if rows.is_empty() {
        return bad("--rows names no row".into());
    }
    Ok(StoreOpts {
        target,
        latency: c.latency.unwrap_or(Duration::from_millis(20)),
        per_byte,
        request_mib_per_s,
        pool_frames,
        read_sizes,
        in_flight,
        per_page_pages,
        density: s.density.unwrap_or(0.01),
        stall_every,
        stall: s.stall.unwrap_or(Duration::from_secs(2)),
        throttle_chunk: s.throttle_chunk.unwrap_or(1 << 20),
        scans: c.scans,
        workers: c.workers,
        rows,
        repeat: c.repeat,
        json: c.json,
        verbose: c.verbose,
        full: c.full,
    })
}

/// Enough frames for the grid's largest request size × most GETs in
/// flight and for the defaults, at most [`MAX_POOL_FRAMES`] (2 GiB).
fn default_pool_frames(read_sizes: &[u64], in_flight: &[usize]) -> usize {
    let q = read_sizes
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(DEFAULT_READ_BYTES as u64);
    let m = in_flight
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(DEFAULT_READS_IN_FLIGHT);
    ((q as usize / BLOCK_SIZE) * m).clamp(POOL64_FRAMES, MAX_POOL_FRAMES)
}

// ---------------------------------------------------------------------------
// The ideal.

/// What a row's ideal assumes of the link: the configured latency and
/// per-byte wait of every GET, and the server's measured bandwidth.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Link {
    /// Seconds before a GET's body starts.
    pub(crate) latency: f64,
    /// Seconds per byte of one GET's body (0: no limit).
    pub(crate) per_byte: f64,
    /// Bytes per second the server delivers, all GETs together
    /// (`f64::INFINITY`: no limit).
    pub(crate) server: f64,
}

/// The time one request of `q` bytes takes with `sharing` requests in
/// flight: the latency, its bytes at the throttle's per-byte wait, and its
/// bytes at its share of the server's bandwidth. `ThrottledStore` sleeps
/// after each body chunk has arrived, so its waits add to the transfer
/// instead of overlapping it ("additive", its documentation says).
fn request_ns(link: Link, q: u64, sharing: usize) -> u64 {
    let share = if link.server.is_finite() && link.server > 0.0 {
        sharing.max(1) as f64 / link.server
    } else {
        0.0
    };
    ((link.latency + (link.per_byte + share) * q as f64) * 1e9).round() as u64
}

/// The ideal time of `requests` (bytes each, in the order they are sent)
/// with at most `slots` in flight: each request takes [`request_ns`] with
/// `min(slots, requests)` sharing the server, on the lane that frees first.
/// For equal requests: `⌈n / k⌉ × (L + q × (w + k / S))`, `k = min(slots,
/// n)` — the time of the configuration when every GET gets an equal share
/// of the server, without a ramp or a CPU cost.
pub(crate) fn ideal_seconds(link: Link, requests: &[u64], slots: usize) -> f64 {
    let slots = slots.clamp(1, requests.len().max(1));
    let mut lanes: BinaryHeap<Reverse<u64>> = (0..slots).map(|_| Reverse(0)).collect();
    // In nanoseconds, so the heap orders integers.
    let mut makespan = 0u64;
    for &q in requests {
        let Reverse(free) = lanes.pop().expect("at least one lane");
        let t = free + request_ns(link, q, slots);
        makespan = makespan.max(t);
        lanes.push(Reverse(t));
    }
    makespan as f64 / 1e9
}

/// A bound below [`ideal_seconds`]: as if the throttle's waits overlapped
/// the transfer (a request takes `L + w × q`, and all the bytes at least
/// `bytes / S`). `ThrottledStore` does not overlap them; the figure says
/// how much of a row's time the additive waits account for.
pub(crate) fn overlap_seconds(link: Link, requests: &[u64], slots: usize) -> f64 {
    let alone = Link {
        server: f64::INFINITY,
        ..link
    };
    let bytes: u64 = requests.iter().sum();
    let transfer = if link.server.is_finite() && link.server > 0.0 {
        bytes as f64 / link.server
    } else {
        0.0
    };
    ideal_seconds(alone, requests, slots).max(transfer)
}

/// [`ideal_seconds`] for requests kept in flight in order, as object_store's
/// `get_ranges` does (futures' `buffered(window)`): request `i` starts when
/// request `i − window` has been returned, which is once it and every
/// request before it have finished; so a long request holds the window.
pub(crate) fn ideal_seconds_in_order(link: Link, requests: &[u64], window: usize) -> f64 {
    let window = window.max(1);
    let sharing = window.min(requests.len().max(1));
    // When each request was returned, in nanoseconds.
    let mut returned: Vec<u64> = Vec::with_capacity(requests.len());
    for (i, &q) in requests.iter().enumerate() {
        let start = if i < window { 0 } else { returned[i - window] };
        let done = start + request_ns(link, q, sharing);
        let prev = returned.last().copied().unwrap_or(0);
        returned.push(done.max(prev));
    }
    returned.last().copied().unwrap_or(0) as f64 / 1e9
}

/// The GETs a stream sends for `blocks` (ascending): runs of consecutive
/// blocks, each cut at `combine` blocks; bytes each.
pub(crate) fn stream_requests(blocks: &[u64], combine: usize) -> Vec<u64> {
    let combine = combine.max(1) as u64;
    let mut out = Vec::new();
    let mut run: Option<(u64, u64)> = None; // (next block, length)
    for &b in blocks {
        run = match run {
            Some((next, len)) if next == b && len < combine => Some((b + 1, len + 1)),
            Some((_, len)) => {
                out.push(len * BLOCK_SIZE as u64);
                Some((b + 1, 1))
            }
            None => Some((b + 1, 1)),
        };
    }
    if let Some((_, len)) = run {
        out.push(len * BLOCK_SIZE as u64);
    }
    out
}

/// object_store's merge of `get_ranges`' ranges (its `merge_ranges`,
/// private): sorted by start, a range that starts at most `coalesce` bytes
/// after the merged range's end joins it.
pub(crate) fn coalesced(ranges: &[Range<u64>], coalesce: u64) -> Vec<Range<u64>> {
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in sorted {
        match out.last_mut() {
            Some(m) if r.start.checked_sub(m.end).is_none_or(|gap| gap <= coalesce) => {
                m.end = m.end.max(r.end);
            }
            _ => out.push(r),
        }
    }
    out
}

/// The request size (blocks) and GETs in flight a stream of `combine`
/// blocks × `max_ios` GETs gets from a pool of `frames`: all of it when it
/// fits, else as many GETs of the largest size that fits (reads shrink
/// before they get fewer).
pub(crate) fn pool_shape(combine: usize, max_ios: usize, frames: usize) -> (usize, usize) {
    let combine = combine.max(1);
    let max_ios = max_ios.max(1);
    if combine * max_ios <= frames {
        (combine, max_ios)
    } else {
        let c = (frames / max_ios).clamp(1, combine);
        (c, max_ios.min(frames / c).max(1))
    }
}

// ---------------------------------------------------------------------------
// The object and its server.

/// The object being scanned, and the server it is on.
struct Target {
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
    /// Its URL.
    name: String,
    nblocks: u64,
    /// What serves it.
    server: String,
    /// curl's arguments before the URL, and the URL; or why curl cannot.
    curl: Result<(Vec<String>, String), String>,
    /// The stamped file it was made from, for the expected checksums.
    local: Option<PathBuf>,
    _nginx: Option<Nginx>,
    _moto: Option<Moto>,
}

fn client() -> ClientOptions {
    ClientOptions::new().with_allow_http(true)
}

fn setup(o: &StoreOpts, rt: &tokio::runtime::Runtime) -> io::Result<Target> {
    let mut t = match &o.target {
        TargetSpec::Serve(kind, size) => {
            let (path, _) = data::scan_file("remote", None, false, *size, BLOCK_SIZE)?;
            let file = path
                .file_name()
                .and_then(|f| f.to_str())
                .ok_or_else(|| io::Error::other("the data file has no name"))?
                .to_string();
            match kind {
                Serve::Nginx => {
                    let dir = path.parent().unwrap_or(&path).to_path_buf();
                    let nginx = Nginx::start(&dir)?;
                    let url = nginx.url(&file);
                    let store: Arc<dyn ObjectStore> = Arc::new(
                        HttpBuilder::new()
                            .with_url(format!("http://127.0.0.1:{}", nginx.port()))
                            .with_client_options(client())
                            .build()
                            .map_err(io::Error::other)?,
                    );
                    Target {
                        store,
                        location: ObjectPath::from(file.as_str()),
                        server: format!("nginx on loopback, serving {}", dir.display()),
                        curl: Ok((Vec::new(), url.clone())),
                        name: url,
                        nblocks: 0,
                        local: Some(path),
                        _nginx: Some(nginx),
                        _moto: None,
                    }
                }
                Serve::Moto => {
                    let moto = Moto::start()?;
                    moto.create_bucket(MOTO_BUCKET)?;
                    let bytes = std::fs::read(&path)?;
                    rt.block_on(moto.put(MOTO_BUCKET, &file, bytes))?;
                    let store: Arc<dyn ObjectStore> = Arc::new(moto.store(MOTO_BUCKET)?);
                    let env: BTreeMap<&str, String> = moto.env().into_iter().collect();
                    let curl = Ok((
                        vec![
                            "--aws-sigv4".to_string(),
                            format!("aws:amz:{}:s3", env["AWS_REGION"]),
                            "--user".to_string(),
                            format!(
                                "{}:{}",
                                env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
                            ),
                        ],
                        format!("{}/{MOTO_BUCKET}/{file}", moto.endpoint()),
                    ));
                    Target {
                        store,
                        location: ObjectPath::from(file.as_str()),
                        name: format!("s3://{MOTO_BUCKET}/{file}"),
                        server: "moto_server on loopback".into(),
                        curl,
                        nblocks: 0,
                        local: Some(path),
                        _nginx: None,
                        _moto: Some(moto),
                    }
                }
            }
        }
        TargetSpec::Url(u) => open_url(u)?,
    };
    let meta = rt
        .block_on(t.store.head(&t.location))
        .map_err(|e| io::Error::other(format!("{}: HEAD: {e}", t.name)))?;
    if meta.size == 0 || meta.size % BLOCK_SIZE as u64 != 0 {
        return Err(io::Error::other(format!(
            "{}: the object is {} bytes, not a whole number of 8 KiB pages",
            t.name, meta.size
        )));
    }
    t.nblocks = meta.size / BLOCK_SIZE as u64;
    Ok(t)
}

/// A store for an existing object's URL.
fn open_url(u: &str) -> io::Result<Target> {
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidInput, format!("{u}: {why}"));
    let url = url::Url::parse(u).map_err(|e| bad(format!("not a URL: {e}")))?;
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("no bucket or host".into()))?
        .to_string();
    let location =
        ObjectPath::from_url_path(url.path()).map_err(|e| bad(format!("bad object path: {e}")))?;
    if location.as_ref().is_empty() {
        return Err(bad("no object key".into()));
    }
    let (store, curl, server): (Arc<dyn ObjectStore>, _, _) = match url.scheme() {
        "s3" => {
            let store = AmazonS3Builder::from_env()
                .with_bucket_name(&host)
                .build()
                .map_err(|e| bad(format!("cannot set up the store: {e}")))?;
            let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
            let curl = match (
                env("AWS_ENDPOINT").or_else(|| env("AWS_ENDPOINT_URL")),
                env("AWS_ACCESS_KEY_ID"),
                env("AWS_SECRET_ACCESS_KEY"),
            ) {
                (Some(endpoint), Some(key), Some(secret)) => Ok((
                    vec![
                        "--aws-sigv4".to_string(),
                        format!(
                            "aws:amz:{}:s3",
                            env("AWS_REGION").unwrap_or_else(|| "us-east-1".into())
                        ),
                        "--user".to_string(),
                        format!("{key}:{secret}"),
                    ],
                    format!(
                        "{}/{host}/{}",
                        endpoint.trim_end_matches('/'),
                        location.as_ref()
                    ),
                )),
                _ => Err("curl needs AWS_ENDPOINT, AWS_ACCESS_KEY_ID and \
                          AWS_SECRET_ACCESS_KEY to sign its GETs"
                    .to_string()),
            };
            let server = match env("AWS_ENDPOINT").or_else(|| env("AWS_ENDPOINT_URL")) {
                Some(e) => format!("the S3 API at {e}"),
                None => "S3".to_string(),
            };
            (Arc::new(store) as Arc<dyn ObjectStore>, curl, server)
        }
        scheme => {
            let base = match url.port() {
                Some(p) => format!("{scheme}://{host}:{p}"),
                None => format!("{scheme}://{host}"),
            };
            let store = HttpBuilder::new()
                .with_url(base.clone())
                .with_client_options(client())
                .build()
                .map_err(|e| bad(format!("cannot set up the store: {e}")))?;
            (
                Arc::new(store) as Arc<dyn ObjectStore>,
                Ok((Vec::new(), u.to_string())),
                format!("the HTTP server at {base}"),
            )
        }
    };
    Ok(Target {
        store,
        location,
        name: u.to_string(),
        nblocks: 0,
        server,
        curl,
        local: None,
        _nginx: None,
        _moto: None,
    })
}

// ---------------------------------------------------------------------------
// The throttle's body chunks.

/// Hands the store's GET bodies on in chunks of at least `min` bytes (the
/// last may be shorter), so that [`ThrottledStore`], which sleeps once per
/// chunk, sleeps at least `min × per-byte wait` each time. tokio's timer
/// rounds every sleep up to its next millisecond tick, and hyper delivers a
/// body in chunks of up to 400 KiB, often tens of KiB: a sleep per such
/// chunk at 16 ns a byte is 0.3–6.5 ms, rounded up by up to a millisecond
/// each, which alone cut a 4 MiB GET's bandwidth by a fifth (measured: 108
/// ms instead of 87). At 1 MiB a chunk the rounding is at most 6% of it.
/// The bytes are copied once into the larger chunks.
#[derive(Debug)]
struct Rechunk {
    inner: Arc<dyn ObjectStore>,
    min: usize,
}

impl std::fmt::Display for Rechunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rechunk({}, {} bytes)", self.inner, self.min)
    }
}

/// `body` in chunks of at least `min` bytes; an error comes after the
/// bytes before it.
fn rechunk(
    body: futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    min: usize,
) -> futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>> {
    use futures::StreamExt;
    struct State {
        body: futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
        buf: bytes::BytesMut,
        error: Option<object_store::Error>,
        done: bool,
    }
    let state = State {
        body,
        buf: bytes::BytesMut::new(),
        error: None,
        done: false,
    };
    futures::stream::unfold(state, move |mut st| async move {
        if let Some(e) = st.error.take() {
            st.done = true;
            return Some((Err(e), st));
        }
        if st.done {
            return None;
        }
        loop {
            match st.body.next().await {
                Some(Ok(b)) if st.buf.is_empty() && b.len() >= min => return Some((Ok(b), st)),
                Some(Ok(b)) => {
                    st.buf.extend_from_slice(&b);
                    if st.buf.len() >= min {
                        let out = st.buf.split().freeze();
                        return Some((Ok(out), st));
                    }
                }
                Some(Err(e)) if st.buf.is_empty() => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                Some(Err(e)) => {
                    st.error = Some(e);
                    let out = st.buf.split().freeze();
                    return Some((Ok(out), st));
                }
                None => {
                    st.done = true;
                    if st.buf.is_empty() {
                        return None;
                    }
                    let out = st.buf.split().freeze();
                    return Some((Ok(out), st));
                }
            }
        }
    })
    .boxed()
}

#[async_trait::async_trait]
impl ObjectStore for Rechunk {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: object_store::GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        let r = self.inner.get_opts(location, options).await?;
        let (meta, range, attributes, extensions) = (
            r.meta.clone(),
            r.range.clone(),
            r.attributes.clone(),
            r.extensions.clone(),
        );
        Ok(object_store::GetResult {
            payload: object_store::GetResultPayload::Stream(rechunk(r.into_stream(), self.min)),
            meta,
            range,
            attributes,
            extensions,
        })
    }

    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

// ---------------------------------------------------------------------------
// Configurations and runs.

/// Which pages a row reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pat {
    Seq,
    Bitmap,
}

/// One configuration, run `--repeat` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Config {
    Curl,
    CurlRanges,
    RangeGets,
    Throttle,
    Unthrottled,
    PerPage(Pat),
    GetRanges(Pat),
    Stream(Pat),
    /// The defaults with PostgreSQL's ramp (no full look-ahead).
    Ramp,
    Cell {
        bytes: u64,
        in_flight: usize,
    },
    Pool64,
    SyncOn,
    Parallel,
    Stalled {
        hedging: bool,
    },
}

impl Config {
    fn row(self) -> &'static str {
        match self {
            Config::Curl => "server-curl",
            Config::CurlRanges => "server-curl-ranges",
            Config::RangeGets => "server-range-gets",
            Config::Throttle => "throttle",
            Config::Unthrottled => "unthrottled",
            Config::PerPage(_) => "per-page",
            Config::GetRanges(_) => "get-ranges",
            Config::Stream(_) => "pagestream",
            Config::Ramp => "pagestream-ramp",
            Config::Cell { .. } => "grid",
            Config::Pool64 => "pool64",
            Config::SyncOn => "sync-on",
            Config::Parallel => "parallel",
            Config::Stalled { hedging: true } => "hedge-on",
            Config::Stalled { hedging: false } => "hedge-off",
        }
    }

    fn reader(self) -> &'static str {
        match self {
            Config::Curl | Config::CurlRanges => "curl",
            Config::RangeGets | Config::Throttle | Config::PerPage(_) => "object_store get_range",
            Config::GetRanges(_) => "object_store get_ranges",
            Config::SyncOn => "pagestream-scans",
            Config::Parallel => "pagestream-parallel",
            _ => "pagestream",
        }
    }

    fn pat(self) -> Pat {
        match self {
            Config::PerPage(p) | Config::GetRanges(p) | Config::Stream(p) => p,
            _ => Pat::Seq,
        }
    }

    fn is_server(self) -> bool {
        matches!(self, Config::Curl | Config::CurlRanges | Config::RangeGets)
    }

    /// Request size and GETs in flight of a stream row.
    fn shape(self) -> Option<(usize, usize)> {
        match self {
            Config::Cell { bytes, in_flight } => Some((bytes as usize, in_flight)),
            Config::Unthrottled
            | Config::Stream(_)
            | Config::Ramp
            | Config::Pool64
            | Config::SyncOn
            | Config::Parallel
            | Config::Stalled { .. } => Some((DEFAULT_READ_BYTES, DEFAULT_READS_IN_FLIGHT)),
            _ => None,
        }
    }
}

/// One run of one configuration.
#[derive(Debug, Clone, Default)]
struct Sample {
    seconds: f64,
    /// Pages handed to the consumer (all streams).
    pages: u64,
    /// GETs sent (hedges included), and their bytes.
    gets: u64,
    get_bytes: u64,
    hedged: u64,
    hedge_won: u64,
    stalled: u64,
    first_byte_ms: f64,
    /// The streams' counters, merged.
    stats: Option<StreamStats>,
}

/// Every run of one configuration.
struct Cell {
    config: Config,
    runs: Vec<Sample>,
    error: Option<String>,
}

impl Cell {
    fn seconds(&self) -> Option<Spread> {
        Spread::of(&self.runs.iter().map(|r| r.seconds).collect::<Vec<_>>())
    }

    /// The run with the median time (the lower middle for an even count).
    fn median_run(&self) -> Option<&Sample> {
        let mut order: Vec<&Sample> = self.runs.iter().collect();
        order.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
        order.get(order.len().saturating_sub(1) / 2).copied()
    }

    fn mib_per_s(&self) -> Option<Spread> {
        Spread::of(
            &self
                .runs
                .iter()
                .map(|r| mib_per_s(r.pages * BLOCK_SIZE as u64, r.seconds))
                .collect::<Vec<_>>(),
        )
    }
}

/// What every run shares.
struct Bench<'a> {
    o: &'a StoreOpts,
    rt: &'a tokio::runtime::Runtime,
    t: Target,
    throttled: Arc<dyn ObjectStore>,
    pool: BufferPool,
    pool64: Option<BufferPool>,
    seq: Vec<u64>,
    bitmap: Vec<u64>,
    /// Expected checksums by block set (from the local file, or the first
    /// run over the set).
    expect: RefCell<BTreeMap<String, Checksum>>,
}

impl Bench<'_> {
    fn blocks(&self, p: Pat) -> &[u64] {
        match p {
            Pat::Seq => &self.seq,
            Pat::Bitmap => &self.bitmap,
        }
    }

    fn prefix(&self, p: Pat) -> &[u64] {
        let b = self.blocks(p);
        &b[..b.len().min(self.o.per_page_pages as usize)]
    }

    fn pattern_name(&self, p: Pat) -> String {
        match p {
            Pat::Seq => "sequential".into(),
            Pat::Bitmap => Pattern::Bitmap(self.o.density).name(),
        }
    }

    /// Checks `got` against the block set's checksum.
    fn check(&self, set: &str, blocks: &[u64], got: Checksum, who: &str) -> io::Result<()> {
        let mut expect = self.expect.borrow_mut();
        let want = match expect.get(set) {
            Some(w) => *w,
            None => {
                let w = match &self.t.local {
                    Some(path) => local_checksum(path, blocks)?,
                    None => got,
                };
                expect.insert(set.to_string(), w);
                w
            }
        };
        if got != want {
            return Err(io::Error::other(format!(
                "{who}: {} pages with checksum {}, expected {} with {} ({set})",
                got.pages, got.sum, want.pages, want.sum
            )));
        }
        Ok(())
    }

    fn set_name(&self, p: Pat, prefix: bool) -> String {
        let base = self.pattern_name(p);
        if prefix {
            format!("{base}, first {} pages", self.prefix(p).len())
        } else {
            base
        }
    }

    fn run(&self, c: Config) -> io::Result<Sample> {
        match c {
            Config::Curl => self.curl(false),
            Config::CurlRanges => self.curl(true),
            Config::RangeGets => self.range_gets(),
            Config::Throttle => self.throttle_check(),
            Config::PerPage(p) => self.per_page(p),
            Config::GetRanges(p) => self.get_ranges(p),
            Config::Unthrottled => self.stream(c, Arc::clone(&self.t.store), Hedging::default()),
            Config::Stalled { hedging } => {
                let stalling = Arc::new(Stalling::new(
                    Arc::clone(&self.throttled),
                    self.o.stall_every,
                    self.o.stall,
                ));
                let h = if hedging {
                    Hedging::default()
                } else {
                    Hedging::off()
                };
                let mut s = self.stream(c, Arc::clone(&stalling) as Arc<dyn ObjectStore>, h)?;
                s.stalled = stalling.stalled();
                Ok(s)
            }
            _ => self.stream(c, Arc::clone(&self.throttled), Hedging::default()),
        }
    }

    /// The N equal ranges of the server rows (N: the engine's default GETs
    /// in flight, at most one per page).
    fn split(&self) -> Vec<Range<u64>> {
        let n = (DEFAULT_READS_IN_FLIGHT as u64).min(self.t.nblocks);
        let per = self.t.nblocks.div_ceil(n);
        (0..n)
            .map(|i| i * per..((i + 1) * per).min(self.t.nblocks))
            .filter(|r| !r.is_empty())
            .map(|r| r.start * BLOCK_SIZE as u64..r.end * BLOCK_SIZE as u64)
            .collect()
    }

    /// `curl` of the whole object, or of [`split`](Self::split)'s ranges
    /// with `--parallel` in one curl per CPU (one curl is one thread), all
    /// to /dev/null; timed by curl: the latest end of a transfer, from when
    /// the first curl was started (so curl's start-up is not counted).
    fn curl(&self, ranges: bool) -> io::Result<Sample> {
        let (extra, url) = self
            .t
            .curl
            .as_ref()
            .map_err(|e| io::Error::other(e.clone()))?;
        let procs = if ranges {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            1
        };
        let split = self.split();
        let per = split.len().div_ceil(procs).max(1);
        let mut children = Vec::new();
        let mut configs = Vec::new();
        let t0 = Instant::now();
        for (k, part) in split.chunks(per).enumerate() {
            let mut cmd = Command::new("curl");
            cmd.args(["-sS", "--fail", "-w", "%{size_download} %{time_total}\n"])
                .args(extra)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            if ranges {
                let cfg = std::env::temp_dir()
                    .join(format!("pagestream-remote-curl-{}-{k}", std::process::id()));
                let mut text = String::new();
                for r in part {
                    let _ = writeln!(
                        text,
                        "url = \"{url}\"\nrange = {}-{}\noutput = \"/dev/null\"",
                        r.start,
                        r.end - 1
                    );
                }
                std::fs::write(&cfg, text)?;
                cmd.args([
                    "--parallel",
                    "--parallel-immediate",
                    "--parallel-max",
                    &part.len().to_string(),
                    "-K",
                ])
                .arg(&cfg);
                configs.push(cfg);
            } else {
                cmd.args(["-o", "/dev/null"]).arg(url);
            }
            let started = t0.elapsed().as_secs_f64();
            let child = cmd
                .spawn()
                .map_err(|e| io::Error::other(format!("curl: {e}")))?;
            children.push((started, child));
            if !ranges {
                break;
            }
        }
        let (mut bytes, mut secs) = (0u64, 0f64);
        let mut failure = None;
        for (started, child) in children {
            let out = child
                .wait_with_output()
                .map_err(|e| io::Error::other(format!("curl: {e}")))?;
            if !out.status.success() {
                failure = Some(format!(
                    "curl: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let mut w = line.split_whitespace();
                let b: u64 = w.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                let s: f64 = w.next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
                bytes += b;
                secs = secs.max(started + s);
            }
        }
        for c in configs {
            let _ = std::fs::remove_file(c);
        }
        if let Some(f) = failure {
            return Err(io::Error::other(f));
        }
        let want = self.t.nblocks * BLOCK_SIZE as u64;
        if bytes != want || secs <= 0.0 {
            return Err(io::Error::other(format!(
                "curl read {bytes} bytes of {want} in {secs} s"
            )));
        }
        Ok(Sample {
            seconds: secs,
            pages: self.t.nblocks,
            gets: if ranges { split.len() as u64 } else { 1 },
            get_bytes: bytes,
            ..Sample::default()
        })
    }

    /// [`split`](Self::split)'s ranges with object_store's `get_range`,
    /// each a task on the runtime, unthrottled.
    fn range_gets(&self) -> io::Result<Sample> {
        let ranges = self.split();
        let start = Instant::now();
        let bytes = self.rt.block_on(async {
            let tasks: Vec<_> = ranges
                .iter()
                .map(|r| {
                    let store = Arc::clone(&self.t.store);
                    let loc = self.t.location.clone();
                    let r = r.clone();
                    self.rt
                        .spawn(async move { store.get_range(&loc, r).await.map(|b| b.len()) })
                })
                .collect();
            let mut bytes = 0;
            for t in tasks {
                bytes += t
                    .await
                    .map_err(io::Error::other)?
                    .map_err(io::Error::other)? as u64;
            }
            Ok::<_, io::Error>(bytes)
        })?;
        Ok(Sample {
            seconds: start.elapsed().as_secs_f64(),
            pages: bytes / BLOCK_SIZE as u64,
            gets: ranges.len() as u64,
            get_bytes: bytes,
            ..Sample::default()
        })
    }

    /// One GET of the default request size through the throttle.
    fn throttle_check(&self) -> io::Result<Sample> {
        let len = (DEFAULT_READ_BYTES as u64).min(self.t.nblocks * BLOCK_SIZE as u64);
        let start = Instant::now();
        let b = self
            .rt
            .block_on(self.throttled.get_range(&self.t.location, 0..len))
            .map_err(io::Error::other)?;
        Ok(Sample {
            seconds: start.elapsed().as_secs_f64(),
            pages: b.len() as u64 / BLOCK_SIZE as u64,
            gets: 1,
            get_bytes: b.len() as u64,
            ..Sample::default()
        })
    }

    /// One GET per page of the prefix, serially, through the throttle.
    fn per_page(&self, p: Pat) -> io::Result<Sample> {
        let blocks = self.prefix(p);
        let start = Instant::now();
        let sum = self.rt.block_on(async {
            let mut sum = Checksum::default();
            for &b in blocks {
                let r = b * BLOCK_SIZE as u64..(b + 1) * BLOCK_SIZE as u64;
                let page = self
                    .throttled
                    .get_range(&self.t.location, r)
                    .await
                    .map_err(io::Error::other)?;
                sum.add(b, &page);
            }
            Ok::<_, io::Error>(sum)
        })?;
        let seconds = start.elapsed().as_secs_f64();
        self.check(&self.set_name(p, true), blocks, sum, "per-page")?;
        Ok(Sample {
            seconds,
            pages: blocks.len() as u64,
            gets: blocks.len() as u64,
            get_bytes: (blocks.len() * BLOCK_SIZE) as u64,
            ..Sample::default()
        })
    }

    /// object_store's `get_ranges` over the pages' ranges: its coalescing
    /// over the throttled store's `get_range` (see the module docs).
    fn get_ranges(&self, p: Pat) -> io::Result<Sample> {
        let blocks = self.blocks(p);
        let ranges: Vec<Range<u64>> = blocks
            .iter()
            .map(|&b| b * BLOCK_SIZE as u64..(b + 1) * BLOCK_SIZE as u64)
            .collect();
        let gets = AtomicU64::new(0);
        let got = AtomicU64::new(0);
        let (throttled, location) = (&self.throttled, &self.t.location);
        let start = Instant::now();
        let pages = self
            .rt
            .block_on(object_store::coalesce_ranges(
                &ranges,
                |r| {
                    gets.fetch_add(1, Ordering::Relaxed);
                    got.fetch_add(r.end - r.start, Ordering::Relaxed);
                    throttled.get_range(location, r)
                },
                object_store::OBJECT_STORE_COALESCE_DEFAULT,
            ))
            .map_err(io::Error::other)?;
        let mut sum = Checksum::default();
        for (&b, page) in blocks.iter().zip(&pages) {
            sum.add(b, page);
        }
        let seconds = start.elapsed().as_secs_f64();
        self.check(&self.set_name(p, false), blocks, sum, "get-ranges")?;
        Ok(Sample {
            seconds,
            pages: blocks.len() as u64,
            gets: gets.into_inner(),
            get_bytes: got.into_inner(),
            ..Sample::default()
        })
    }

    /// A stream row over `store`.
    fn stream(
        &self,
        c: Config,
        store: Arc<dyn ObjectStore>,
        hedging: Hedging,
    ) -> io::Result<Sample> {
        let (read_bytes, in_flight) = c.shape().expect("a stream row");
        let pool = match c {
            Config::Pool64 => self.pool64.as_ref().expect("the 64 MiB pool"),
            _ => &self.pool,
        };
        let engine = ObjectStoreEngine::builder()
            .handle(self.rt.handle().clone())
            .read_bytes(read_bytes)
            .reads_in_flight(in_flight)
            .full_look_ahead(c != Config::Ramp)
            .hedging(hedging)
            .build()?;
        let file: ObjectFile =
            self.rt
                .block_on(engine.open(store, self.t.location.clone(), self.t.name.clone()))?;
        let n = self.t.nblocks;
        let key = file.id();
        let sync = SyncScans::new();
        let parallel = ParallelScan::new(n);
        let (count, stagger) = match c {
            Config::SyncOn => (self.o.scans, Some(super::stagger(n))),
            Config::Parallel => (self.o.workers, None),
            _ => (1, None),
        };
        let pat = c.pat();
        let make = || -> io::Result<ReadStream<ObjectStoreEngine, Source>> {
            let src: Source = match c {
                Config::SyncOn => Box::new(sync.scan(key, n)),
                Config::Parallel => Box::new(parallel.worker()),
                _ if pat == Pat::Seq => Box::new(source::forward(0..n)),
                _ => Box::new(source::iter(self.bitmap.clone())),
            };
            ReadStream::builder(pool, engine.clone(), file.clone())
                .full(self.o.full)
                .build(src)
                .map_err(io::Error::from)
        };
        let report = |block: u64| {
            if c == Config::SyncOn {
                sync.report(key, block + 1);
            }
        };
        let start = Instant::now();
        let result = drive(make, report, count, stagger, Exec::Tokio(self.rt));
        let seconds = start.elapsed().as_secs_f64();
        let es = engine.stats();
        // Cold for the next run (every stream has ended: nothing is pinned).
        pool.invalidate(key);
        let (sums, stats) = result?;
        let mut merged = StreamStats::default();
        for s in &stats {
            merged.merge(s);
        }
        if merged.errors > 0 {
            return Err(io::Error::other(format!(
                "{}: {} pages failed",
                c.row(),
                merged.errors
            )));
        }
        let who = c.row();
        let blocks = self.blocks(pat);
        match c {
            Config::Parallel => {
                let mut all = Checksum::default();
                for s in &sums {
                    all.sum = all.sum.wrapping_add(s.sum);
                    all.pages += s.pages;
                }
                self.check(&self.set_name(Pat::Seq, false), blocks, all, who)?;
            }
            _ => {
                for s in &sums {
                    self.check(&self.set_name(pat, false), blocks, *s, who)?;
                }
            }
        }
        if self.o.verbose {
            eprintln!(
                "remote: {} {}: {:.3} s, {} GETs ({} hedged, {} won), {} reads, {:.0} KiB per \
                 read, {} in flight at most, limit {}",
                c.row(),
                self.pattern_name(pat),
                seconds,
                es.gets,
                es.hedged,
                es.hedge_won,
                merged.reads,
                merged.mean_blocks_per_read() * BLOCK_SIZE as f64 / 1024.0,
                merged.max_in_flight,
                limit_name(merged.binding_limit())
            );
        }
        Ok(Sample {
            seconds,
            pages: sums.iter().map(|s| s.pages).sum(),
            gets: es.gets,
            get_bytes: es.bytes,
            hedged: es.hedged,
            hedge_won: es.hedge_won,
            stalled: 0,
            first_byte_ms: es.first_byte_mean_ns as f64 / 1e6,
            stats: Some(merged),
        })
    }

    /// The row's ideal time and the overlap bound below it
    /// ([`overlap_seconds`]), given the server's bandwidth (bytes/s).
    fn ideal(&self, c: Config, server: f64) -> Option<(f64, f64)> {
        let o = self.o;
        let link = Link {
            latency: o.latency.as_secs_f64(),
            per_byte: o.per_byte.as_secs_f64(),
            server,
        };
        let frames = |c: Config| match c {
            Config::Pool64 => POOL64_FRAMES,
            _ => o.pool_frames,
        };
        let page = BLOCK_SIZE as u64;
        let both = |link: Link, requests: &[u64], slots: usize| {
            Some((
                ideal_seconds(link, requests, slots),
                overlap_seconds(link, requests, slots),
            ))
        };
        match c {
            Config::Curl | Config::CurlRanges | Config::RangeGets => None,
            Config::Throttle => both(
                link,
                &[(DEFAULT_READ_BYTES as u64).min(self.t.nblocks * page)],
                1,
            ),
            Config::PerPage(p) => both(link, &vec![page; self.prefix(p).len()], 1),
            Config::GetRanges(p) => {
                let ranges: Vec<Range<u64>> = self
                    .blocks(p)
                    .iter()
                    .map(|&b| b * page..(b + 1) * page)
                    .collect();
                let merged: Vec<u64> =
                    coalesced(&ranges, object_store::OBJECT_STORE_COALESCE_DEFAULT)
                        .iter()
                        .map(|r| r.end - r.start)
                        .collect();
                let alone = Link {
                    server: f64::INFINITY,
                    ..link
                };
                let bytes: u64 = merged.iter().sum();
                Some((
                    ideal_seconds_in_order(link, &merged, GET_RANGES_PARALLEL),
                    ideal_seconds_in_order(alone, &merged, GET_RANGES_PARALLEL)
                        .max(bytes as f64 / server),
                ))
            }
            _ => {
                let (bytes, in_flight) = c.shape()?;
                let combine = bytes / BLOCK_SIZE;
                let streams = match c {
                    Config::SyncOn => o.scans,
                    Config::Parallel => o.workers,
                    _ => 1,
                };
                let (combine, slots) = pool_shape(combine, in_flight * streams, frames(c));
                let link = if c == Config::Unthrottled {
                    Link {
                        latency: 0.0,
                        per_byte: 0.0,
                        server,
                    }
                } else {
                    link
                };
                let requests = match c {
                    Config::SyncOn => {
                        // The pack's reads: the object once, and what the
                        // pool cannot keep of the pages the later scans
                        // need again after the wrap.
                        let n = self.t.nblocks;
                        let g = super::stagger(n);
                        let again = ((o.scans as u64 - 1) * g).saturating_sub(frames(c) as u64);
                        let again = if frames(c) as u64 >= n { 0 } else { again };
                        let mut r = stream_requests(&self.seq, combine);
                        let extra: Vec<u64> = (0..again).collect();
                        r.extend(stream_requests(&extra, combine));
                        r
                    }
                    _ => stream_requests(self.blocks(c.pat()), combine),
                };
                both(link, &requests, slots)
            }
        }
    }
}

/// The checksum of `blocks` of the local file the object was made from.
fn local_checksum(path: &std::path::Path, blocks: &[u64]) -> io::Result<Checksum> {
    let f = std::fs::File::open(path)?;
    let mut page = vec![0u8; BLOCK_SIZE];
    let mut sum = Checksum::default();
    for &b in blocks {
        f.read_exact_at(&mut page, b * BLOCK_SIZE as u64)?;
        sum.add(b, &page);
    }
    Ok(sum)
}

/// The configurations `o` asks for, in the order they print. The server
/// rows and the throttle check are always there: the ideal needs them.
fn configs(o: &StoreOpts) -> Vec<Config> {
    let mut v = vec![
        Config::Curl,
        Config::CurlRanges,
        Config::RangeGets,
        Config::Throttle,
    ];
    for row in &o.rows {
        match row {
            StoreRow::Ceiling => v.push(Config::Unthrottled),
            StoreRow::PerPage => {
                v.extend([Config::PerPage(Pat::Seq), Config::PerPage(Pat::Bitmap)])
            }
            StoreRow::GetRanges => {
                v.extend([Config::GetRanges(Pat::Seq), Config::GetRanges(Pat::Bitmap)])
            }
            StoreRow::Pagestream => v.extend([
                Config::Stream(Pat::Seq),
                Config::Ramp,
                Config::Stream(Pat::Bitmap),
            ]),
            StoreRow::Grid => {
                for &bytes in &o.read_sizes {
                    for &in_flight in &o.in_flight {
                        v.push(Config::Cell { bytes, in_flight });
                    }
                }
            }
            StoreRow::Pool64 => v.push(Config::Pool64),
            StoreRow::SyncOn => v.push(Config::SyncOn),
            StoreRow::Parallel => v.push(Config::Parallel),
            StoreRow::Hedge => v.extend([
                Config::Stalled { hedging: true },
                Config::Stalled { hedging: false },
            ]),
        }
    }
    v
}

/// Runs every configuration `o.repeat` times, interleaved, and returns the
/// rows as JSON objects (and prints the table unless `o.json`).
pub(crate) fn measure(o: &StoreOpts) -> io::Result<Vec<JsonObject>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let t = setup(o, &rt)?;
    let throttle = ThrottleConfig {
        wait_get_per_call: o.latency,
        wait_get_per_byte: o.per_byte,
        ..ThrottleConfig::default()
    };
    let under: Arc<dyn ObjectStore> = if o.throttle_chunk > 0 && !o.per_byte.is_zero() {
        Arc::new(Rechunk {
            inner: Arc::clone(&t.store),
            min: o.throttle_chunk as usize,
        })
    } else {
        Arc::clone(&t.store)
    };
    let throttled: Arc<dyn ObjectStore> = Arc::new(ThrottledStore::new(under, throttle));
    let pool = BufferPool::builder()
        .frames(o.pool_frames)
        .block_size(BLOCK_SIZE)
        .prefault(true)
        .build()
        .map_err(io::Error::from)?;
    let pool64 = if o.rows.contains(&StoreRow::Pool64) {
        Some(
            BufferPool::builder()
                .frames(POOL64_FRAMES)
                .block_size(BLOCK_SIZE)
                .prefault(true)
                .build()
                .map_err(io::Error::from)?,
        )
    } else {
        None
    };
    let seq: Vec<u64> = (0..t.nblocks).collect();
    let bitmap = Pattern::Bitmap(o.density).blocks(t.nblocks, 1);
    let bench = Bench {
        o,
        rt: &rt,
        t,
        throttled,
        pool,
        pool64,
        seq,
        bitmap,
        expect: RefCell::new(BTreeMap::new()),
    };
    let mut cells: Vec<Cell> = configs(o)
        .into_iter()
        .map(|config| Cell {
            config,
            runs: Vec::new(),
            error: None,
        })
        .collect();
    if !o.json {
        println!("{}", banner(&bench));
    }
    let n = cells.len();
    for rep in 0..o.repeat {
        if !o.json {
            eprintln!("remote: repeat {} of {}", rep + 1, o.repeat);
        }
        for k in 0..n {
            let cell = &mut cells[(k + rep) % n];
            if cell.error.is_some() {
                continue;
            }
            match bench.run(cell.config) {
                Ok(s) => cell.runs.push(s),
                Err(e) => {
                    eprintln!(
                        "remote: {} {}: {e}",
                        cell.config.row(),
                        bench.pattern_name(cell.config.pat())
                    );
                    cell.error = Some(e.to_string());
                }
            }
        }
    }
    let rows = summarize(&bench, &cells);
    if !o.json {
        print_table(&rows);
    }
    Ok(rows)
}

/// The line above the table.
fn banner(b: &Bench<'_>) -> String {
    let o = b.o;
    format!(
        "remote --store: {} ({}, {}), {} ms per GET, {} per GET ({} ns per byte), pool {}, {} \
         run(s) per configuration, interleaved",
        b.t.name,
        format_size(b.t.nblocks * BLOCK_SIZE as u64),
        b.t.server,
        o.latency.as_secs_f64() * 1e3,
        bandwidth_text(o),
        o.per_byte.as_nanos(),
        format_size((o.pool_frames * BLOCK_SIZE) as u64),
        o.repeat
    )
}

fn bandwidth_text(o: &StoreOpts) -> String {
    if o.per_byte.is_zero() {
        "no bandwidth limit".into()
    } else {
        format!(
            "{} MiB/s asked, {:.1} MiB/s configured",
            o.request_mib_per_s,
            1.0 / o.per_byte.as_secs_f64() / (1u64 << 20) as f64
        )
    }
}

/// The rows' JSON objects.
fn summarize(b: &Bench<'_>, cells: &[Cell]) -> Vec<JsonObject> {
    let o = b.o;
    // The best median of the server rows (the server's own ceiling, the
    // issue's "best of curl / parallel range GETs"), and the server's
    // bandwidth for the ideal: the most any reader got from it unthrottled
    // (those rows and pagestream's `unthrottled`: the server rows' clients
    // may be what limits them).
    let best_of = |keep: &dyn Fn(Config) -> bool| {
        cells
            .iter()
            .filter(|c| keep(c.config))
            .filter_map(|c| c.mib_per_s().map(|s| s.median))
            .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
    };
    let ceiling_mib = best_of(&|c| c.is_server());
    let server_mib = best_of(&|c| c.is_server() || c == Config::Unthrottled);
    let bytes_per_s = |m: Option<f64>| m.map_or(f64::INFINITY, |m| m * (1u64 << 20) as f64);
    let server = bytes_per_s(server_mib);
    let median_of = |pred: &dyn Fn(Config) -> bool| {
        cells
            .iter()
            .find(|c| pred(c.config))
            .and_then(|c| c.mib_per_s())
            .map(|s| s.median)
    };
    let mut out = Vec::new();
    for c in cells {
        let cfg = c.config;
        let pat = cfg.pat();
        let mut j = JsonObject::default();
        j.set("row", cfg.row())
            .set("reader", cfg.reader())
            .set("pattern", b.pattern_name(pat))
            .set("store", b.t.name.as_str())
            .set("server", b.t.server.as_str())
            .set("object_bytes", b.t.nblocks * BLOCK_SIZE as u64)
            .set("latency_ms", o.latency.as_secs_f64() * 1e3)
            .set("request_mib_per_s", o.request_mib_per_s)
            .set("per_byte_ns", o.per_byte.as_nanos() as u64)
            .set(
                "pool_bytes",
                (match cfg {
                    Config::Pool64 => POOL64_FRAMES,
                    _ => o.pool_frames,
                } * BLOCK_SIZE) as u64,
            )
            .set("runs", c.runs.len());
        if let Some(m) = server_mib {
            j.set("server_mib_per_s", m);
        }
        if let Some(m) = ceiling_mib {
            j.set("server_rows_mib_per_s", m);
        }
        if let Some((bytes, m)) = cfg.shape() {
            j.set("read_bytes", bytes as u64).set("reads_in_flight", m);
        }
        match cfg {
            Config::PerPage(_) => {
                j.set("read_bytes", BLOCK_SIZE as u64)
                    .set("reads_in_flight", 1)
                    .set("prefix", true);
            }
            Config::GetRanges(_) => {
                j.set(
                    "coalesce_bytes",
                    object_store::OBJECT_STORE_COALESCE_DEFAULT,
                )
                .set("reads_in_flight", GET_RANGES_PARALLEL);
            }
            Config::Throttle => {
                j.set(
                    "read_bytes",
                    (DEFAULT_READ_BYTES as u64).min(b.t.nblocks * BLOCK_SIZE as u64),
                )
                .set("reads_in_flight", 1);
            }
            Config::Curl | Config::CurlRanges | Config::RangeGets => {
                j.set(
                    "reads_in_flight",
                    if cfg == Config::Curl {
                        1
                    } else {
                        b.split().len()
                    },
                );
            }
            _ => {}
        }
        j.set(
            "streams",
            match cfg {
                Config::SyncOn => o.scans,
                Config::Parallel => o.workers,
                _ => 1,
            },
        );
        if let Some(e) = &c.error {
            j.set("error", e.as_str());
        }
        let (Some(secs), Some(mib), Some(r)) = (c.seconds(), c.mib_per_s(), c.median_run()) else {
            out.push(j);
            continue;
        };
        j.set("pages", r.pages)
            .set("seconds", secs.median)
            .set("seconds_min", secs.min)
            .set("seconds_max", secs.max)
            .set("mib_per_s", mib.median)
            .set("mib_per_s_min", mib.min)
            .set("mib_per_s_max", mib.max)
            .set(
                "runs_s",
                c.runs
                    .iter()
                    .map(|r| format!("{:.3}", r.seconds))
                    .collect::<Vec<_>>()
                    .join(" "),
            )
            .set("gets", r.gets)
            .set("get_bytes", r.get_bytes);
        let per_page = median_of(&|x| x == Config::PerPage(pat));
        if let Some(p) = per_page {
            if cfg.shape().is_some() && !matches!(cfg, Config::SyncOn | Config::Unthrottled) {
                j.set("vs_per_page", mib.median / p);
            }
        }
        let anchor = median_of(&|x| x == Config::GetRanges(pat));
        if let Some(a) = anchor {
            if !cfg.is_server() && cfg != Config::Throttle && cfg != Config::SyncOn {
                j.set("vs_anchor", mib.median / a);
            }
        }
        // The unthrottled row's own result is not its ideal's bandwidth.
        let s = if cfg == Config::Unthrottled {
            bytes_per_s(ceiling_mib)
        } else {
            server
        };
        if let Some((ideal, overlap)) = b.ideal(cfg, s) {
            j.set("ideal_seconds", ideal)
                .set("overlap_seconds", overlap)
                .set("x_overlap", secs.median / overlap)
                .set(
                    "ideal_mib_per_s",
                    mib_per_s(r.pages * BLOCK_SIZE as u64, ideal),
                )
                .set("x_ideal", secs.median / ideal);
        }
        if let Some(st) = &r.stats {
            j.set("reads", st.reads)
                .set(
                    "mean_request_kib",
                    st.mean_blocks_per_read() * BLOCK_SIZE as f64 / 1024.0,
                )
                .set("max_in_flight", st.max_in_flight)
                .set("max_distance", st.max_distance)
                .set("limit", limit_name(st.binding_limit()))
                .set("hedged", r.hedged)
                .set("hedge_won", r.hedge_won)
                .set("first_byte_ms", r.first_byte_ms)
                .set("full", o.full);
        }
        match cfg {
            Config::Stalled { .. } => {
                j.set("stalled", r.stalled)
                    .set("stall_every", o.stall_every)
                    .set("stall_ms", o.stall.as_secs_f64() * 1e3);
                let unstalled = cells
                    .iter()
                    .find(|x| x.config == Config::Stream(Pat::Seq))
                    .and_then(Cell::seconds);
                if let Some(u) = unstalled {
                    j.set("vs_unstalled", secs.median / u.median);
                }
            }
            Config::Unthrottled => {
                if let Some(m) = ceiling_mib {
                    j.set("vs_best", mib.median / m);
                }
            }
            Config::SyncOn => {
                j.set("stagger_pages", super::stagger(b.t.nblocks));
            }
            _ => {}
        }
        out.push(j);
    }
    out
}

fn print_table(rows: &[JsonObject]) {
    let num = |j: &JsonObject, k: &str| j.get(k).and_then(serde_json::Value::as_f64);
    let mib = |k: &str| {
        rows.first()
            .and_then(|j| num(j, k))
            .map_or("unknown".into(), |m| format!("{m:.0} MiB/s"))
    };
    println!(
        "the server unthrottled: {} (best of its rows), {} (most any reader got: the ideal's)",
        mib("server_rows_mib_per_s"),
        mib("server_mib_per_s")
    );
    println!(
        "{:<18} {:<12} {:>8} {:>4} {:>25} {:>8} {:>9} {:>7} {:>6}  note",
        "row",
        "pattern",
        "request",
        "fl.",
        "MiB/s median (min–max)",
        "x anchor",
        "ideal",
        "x ideal",
        "GETs"
    );
    for j in rows {
        let s = |k: &str| j.get(k).and_then(|v| v.as_str()).unwrap_or("");
        let row = s("row");
        let request = match num(j, "read_bytes") {
            Some(v) => format_size(v as u64),
            None if row == "get-ranges" => "merged".into(),
            None => "-".into(),
        };
        let flight = num(j, "reads_in_flight").map_or("-".into(), |v| format!("{v:.0}"));
        let pattern = if s("pattern") == "sequential" {
            "seq".to_string()
        } else {
            s("pattern").to_string()
        };
        let Some(mib) = num(j, "mib_per_s") else {
            println!(
                "{row:<18} {pattern:<12} {request:>8} {flight:>4}  error: {}",
                s("error")
            );
            continue;
        };
        let spread = format!(
            "{mib:.1} ({:.1}–{:.1})",
            num(j, "mib_per_s_min").unwrap_or(0.0),
            num(j, "mib_per_s_max").unwrap_or(0.0)
        );
        let ratio = |k: &str| num(j, k).map_or("-".into(), |v| format!("{v:.2}x"));
        let mut note = String::new();
        if j.get("prefix").is_some() {
            let _ = write!(note, "first {:.0} pages; ", num(j, "pages").unwrap_or(0.0));
        }
        if let Some(r) = num(j, "reads") {
            let _ = write!(
                note,
                "{r:.0} reads × {:.0} KiB, {:.0} in flight max, limit {}; ",
                num(j, "mean_request_kib").unwrap_or(0.0),
                num(j, "max_in_flight").unwrap_or(0.0),
                s("limit")
            );
        }
        if let Some(h) = num(j, "hedged") {
            if h > 0.0 || row.starts_with("hedge") {
                let _ = write!(
                    note,
                    "hedged {h:.0}, won {:.0}; ",
                    num(j, "hedge_won").unwrap_or(0.0)
                );
            }
        }
        if let Some(st) = num(j, "stalled") {
            let _ = write!(
                note,
                "stalled {st:.0}; {} unstalled; ",
                ratio("vs_unstalled")
            );
        }
        if let Some(v) = num(j, "vs_best") {
            let _ = write!(note, "{v:.2}x the server's best; ");
        }
        println!(
            "{row:<18} {pattern:<12} {request:>8} {flight:>4} {spread:>25} {:>8} {:>9} {:>7} {:>6}  {}",
            ratio("vs_anchor"),
            num(j, "ideal_mib_per_s").map_or("-".into(), |v| format!("{v:.1}")),
            ratio("x_ideal"),
            num(j, "gets").map_or("-".into(), |v| format!("{v:.0}")),
            note.trim_end_matches("; ")
        );
    }
}

/// `remote --store`/`--serve`: measures and prints.
pub(super) fn run(o: &StoreOpts) -> io::Result<()> {
    let rows = measure(o)?;
    if o.json {
        for r in &rows {
            println!("{}", r.to_line());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS20: Link = Link {
        latency: 0.020,
        per_byte: 16e-9,
        server: f64::INFINITY,
    };

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn ideal_of_equal_requests_is_waves_of_one_request_time() {
        let q = 4u64 << 20;
        let t = 0.020 + 16e-9 * q as f64;
        // 64 requests of 4 MiB, 64 in flight: one wave.
        assert!(close(ideal_seconds(MS20, &[q; 64], 64), t));
        // 4 in flight: 16 waves.
        assert!(close(ideal_seconds(MS20, &[q; 64], 4), 16.0 * t));
        // More lanes than requests: still one request time.
        assert!(close(ideal_seconds(MS20, &[q; 3], 128), t));
        // One page per GET, serially.
        let p = 0.020 + 16e-9 * 8192.0;
        assert!(close(ideal_seconds(MS20, &[8192; 128], 1), 128.0 * p));
    }

    #[test]
    fn requests_in_flight_share_the_server_and_its_time_adds_to_the_throttles() {
        let q = 4u64 << 20;
        let gib = (1u64 << 30) as f64;
        let link = Link {
            server: gib,
            ..MS20
        };
        // 64 GETs of 4 MiB share 1 GiB/s: each takes 20 ms, 67 ms of the
        // throttle's waits and 4 MiB at 16 MiB/s (250 ms).
        let t = 0.020 + 16e-9 * q as f64 + 64.0 * q as f64 / gib;
        assert!(close(ideal_seconds(link, &[q; 64], 64), t));
        // Were the waits to overlap the transfer: 256 MiB at 1 GiB/s.
        assert!(close(overlap_seconds(link, &[q; 64], 64), 0.25));
        // Alone, a GET has the whole server: 4 ms more than the throttle.
        let one = 0.020 + 16e-9 * q as f64 + q as f64 / gib;
        assert!(close(ideal_seconds(link, &[q], 1), one));
        // No latency, no throttle: the server alone, however many lanes.
        let bare = Link {
            latency: 0.0,
            per_byte: 0.0,
            server: gib,
        };
        for slots in [1, 4, 64] {
            assert!(close(ideal_seconds(bare, &[q; 64], slots), 0.25), "{slots}");
        }
    }

    #[test]
    fn ideal_of_unequal_requests_fills_the_lane_that_frees_first() {
        let link = Link {
            latency: 1.0,
            per_byte: 0.0,
            server: f64::INFINITY,
        };
        let l = |ms: f64| Link {
            per_byte: ms / 1e3,
            ..link
        };
        // Two lanes; 1 s + 1 s per byte: requests of 3, 1, 1 bytes take
        // 4, 2, 2 s: lane b runs the 2nd and 3rd (2 + 2), lane a the 1st.
        assert!(close(ideal_seconds(l(1000.0), &[3, 1, 1], 2), 4.0));
        // 3 bytes, 1, 1, 1: b runs 2nd, 3rd (4 s), a the 1st then 4th (6 s).
        assert!(close(ideal_seconds(l(1000.0), &[3, 1, 1, 1], 2), 6.0));
        assert_eq!(ideal_seconds(link, &[], 4), 0.0);
    }

    #[test]
    fn in_order_requests_wait_for_the_window_to_move() {
        let link = Link {
            latency: 0.0,
            per_byte: 1.0,
            server: f64::INFINITY,
        };
        // A window of 2: 4 s and 1 s start at 0; the third (1 s) starts
        // when the first is returned (4 s): 5 s. Out of order it would
        // take the second's lane at 1 s: 4 s.
        assert!(close(ideal_seconds_in_order(link, &[4, 1, 1], 2), 5.0));
        assert!(close(ideal_seconds(link, &[4, 1, 1], 2), 4.0));
        // Equal requests: waves, as out of order.
        assert!(close(ideal_seconds_in_order(link, &[2; 6], 3), 4.0));
        assert_eq!(ideal_seconds_in_order(link, &[], 3), 0.0);
    }

    #[test]
    fn stream_requests_are_runs_cut_at_the_request_size() {
        let k = BLOCK_SIZE as u64;
        assert_eq!(
            stream_requests(&[0, 1, 2, 5, 6, 9], 2),
            [2 * k, k, 2 * k, k]
        );
        assert_eq!(
            stream_requests(&(0..10).collect::<Vec<_>>(), 4),
            [4 * k, 4 * k, 2 * k]
        );
        assert!(stream_requests(&[], 4).is_empty());
    }

    #[test]
    fn coalescing_merges_ranges_within_the_gap() {
        let m = 1 << 20;
        let r = coalesced(&[0..10, 10 + m..20 + m, 30 + 3 * m..40 + 3 * m, 5..8], m);
        assert_eq!(r, [0..20 + m, 30 + 3 * m..40 + 3 * m]);
        assert!(coalesced(&[], m).is_empty());
    }

    /// object_store's own coalescing makes the GETs [`coalesced`] says.
    #[test]
    fn coalescing_is_object_stores() {
        let ranges: Vec<Range<u64>> = [0u64, 1, 2, 200, 201, 330, 331, 1000]
            .iter()
            .map(|&b| b * 8192..(b + 1) * 8192)
            .collect();
        let calls = std::sync::Mutex::new(Vec::new());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(object_store::coalesce_ranges(
            &ranges,
            |r| {
                calls.lock().unwrap().push(r.clone());
                async move { Ok::<_, object_store::Error>(bytes_of(r)) }
            },
            object_store::OBJECT_STORE_COALESCE_DEFAULT,
        ))
        .expect("fetched");
        let mut made = calls.into_inner().unwrap();
        made.sort_by_key(|r| r.start);
        assert_eq!(
            made,
            coalesced(&ranges, object_store::OBJECT_STORE_COALESCE_DEFAULT)
        );
    }

    fn bytes_of(r: Range<u64>) -> bytes::Bytes {
        bytes::Bytes::from(vec![0u8; (r.end - r.start) as usize])
    }

    #[test]
    fn a_small_pool_gets_smaller_requests_not_fewer() {
        // 64 GETs of 4 MiB (512 pages) need 32768 frames.
        assert_eq!(pool_shape(512, 64, 32768), (512, 64));
        // 64 MiB: 8192 frames, 64 GETs of 1 MiB.
        assert_eq!(pool_shape(512, 64, 8192), (128, 64));
        // Fewer frames than GETs: one page each, as many as fit.
        assert_eq!(pool_shape(512, 64, 10), (1, 10));
    }
}
