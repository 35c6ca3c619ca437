//! The engine: a read is a range GET on the tokio runtime, streamed into the
//! read's frames.

use crate::file::{FileInner, ObjectFile};
use crate::hedge::{Hedging, Latencies, Waiting};
use crate::url::{build_store, parse};
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, GetResult, ObjectStore, ObjectStoreExt,
    RetryConfig,
};
use pagestream::{EngineCounters, EngineHints, IoEngine, ReadRequest};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// Bytes per GET by default: the size at which a GET's fixed cost (its
/// round trip) is small beside its transfer at the bandwidth one request
/// gets. See the crate docs for the measurement behind it.
pub const DEFAULT_READ_BYTES: usize = 4 << 20;

/// GETs in flight per stream by default: with one request streaming at
/// 25–95 MiB/s, bandwidth comes from many in parallel.
pub const DEFAULT_READS_IN_FLIGHT: usize = 64;

/// Reads pages of objects with range GETs through [`object_store`].
///
/// Made by [`ObjectStoreEngine::builder`] (or [`new`](Self::new)) inside a
/// tokio runtime, whose handle it keeps: every read is a task on that
/// runtime, so reads complete on their own whichever executor polls the
/// stream, and the engine is `Send` and cheap to clone (one `Arc`).
///
/// - **Requests sized for the store**: a stream over this engine combines
///   up to [`read_bytes`](ObjectStoreEngineBuilder::read_bytes) per GET and
///   keeps up to
///   [`reads_in_flight`](ObjectStoreEngineBuilder::reads_in_flight) GETs in
///   flight, unless its builder says otherwise (the engine's
///   [`EngineHints`]). A pool too small for that many full-sized reads gets
///   smaller reads, not fewer.
/// - **Stragglers are hedged** ([`Hedging`]): a GET whose response has not
///   begun within a threshold learnt from the latencies observed so far is
///   sent again; the first copy to finish fills the frames and the other is
///   dropped (cancelled).
/// - **Retries** (5xx, 429, connection errors) are object_store's, set by
///   [`retry`](ObjectStoreEngineBuilder::retry) for stores this engine
///   builds from URLs; an error after the last retry fails that read only,
///   naming the object, the byte range and the store's error.
/// - **Abandoned reads stop**: a GET whose pages no stream wants any more
///   (its stream was dropped or reset, and no other stream waits for them)
///   is cancelled, and its frames go back empty.
/// - **No wrong pages**: a GET for an object with an ETag asks for that
///   version (`If-Match`; with a weak ETag, which `If-Match` never
///   matches, `If-Unmodified-Since` the modification time `head` gave), so
///   an object replaced under a scan fails its reads instead of mixing
///   versions; an object shorter than its length at open is an error,
///   never zeroes.
#[derive(Clone)]
pub struct ObjectStoreEngine {
    inner: Arc<Inner>,
}

struct Inner {
    handle: Handle,
    read_bytes: usize,
    reads_in_flight: usize,
    full_look_ahead: bool,
    latencies: Latencies,
    retry: RetryConfig,
    client: ClientOptions,
    /// Stores built from URLs, by `scheme://authority`, so every object on
    /// one server shares its connection pool.
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
    counters: Counters,
    /// Reads whose task is running.
    running: AtomicUsize,
    /// Reads with a second GET out.
    hedges_in_flight: AtomicUsize,
}

#[derive(Default)]
struct Counters {
    gets: AtomicU64,
    bytes: AtomicU64,
    hedged: AtomicU64,
    hedge_won: AtomicU64,
    aborted: AtomicU64,
    failed: AtomicU64,
    broken_bodies: AtomicU64,
    first_byte_ns: AtomicU64,
    first_byte_max_ns: AtomicU64,
    answered: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Counters of an [`ObjectStoreEngine`], from
/// [`stats`](ObjectStoreEngine::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObjectStoreStats {
    /// GETs sent, hedges included.
    pub gets: u64,
    /// Bytes written into frames.
    pub bytes: u64,
    /// GETs sent a second time because the first had not answered within
    /// the hedging threshold.
    pub hedged: u64,
    /// Hedged reads whose second GET finished first.
    pub hedge_won: u64,
    /// Reads cancelled because no stream wanted their pages any more.
    pub aborted: u64,
    /// Reads that failed after object_store's retries.
    pub failed: u64,
    /// Bodies that broke off after some bytes (after object_store's own
    /// retries): the rest was asked for again.
    pub broken_bodies: u64,
    /// GETs that answered (response headers received).
    pub answered: u64,
    /// Their mean time to the response, in nanoseconds.
    pub first_byte_mean_ns: u64,
    /// The longest of those times, in nanoseconds.
    pub first_byte_max_ns: u64,
    /// The hedging threshold now, in nanoseconds (0: not hedging).
    pub hedge_threshold_ns: u64,
}

impl fmt::Debug for ObjectStoreEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreEngine")
            .field("read_bytes", &self.inner.read_bytes)
            .field("reads_in_flight", &self.inner.reads_in_flight)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Builds an [`ObjectStoreEngine`]; see its setters for the defaults.
#[derive(Debug, Clone)]
#[must_use]
pub struct ObjectStoreEngineBuilder {
    handle: Option<Handle>,
    read_bytes: usize,
    reads_in_flight: usize,
    full_look_ahead: bool,
    hedging: Hedging,
    retry: RetryConfig,
    client: ClientOptions,
}

impl Default for ObjectStoreEngineBuilder {
    fn default() -> Self {
        ObjectStoreEngineBuilder {
            handle: None,
            read_bytes: DEFAULT_READ_BYTES,
            reads_in_flight: DEFAULT_READS_IN_FLIGHT,
            full_look_ahead: true,
            hedging: Hedging::default(),
            retry: default_retry(),
            client: ClientOptions::new(),
        }
    }
}

/// object_store's retry policy, bounded for scans: 5 retries, backoff from
/// 50 ms doubling to at most 2 s, and no retry after 30 s.
fn default_retry() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 5,
        retry_timeout: Duration::from_secs(30),
    }
}

impl ObjectStoreEngineBuilder {
    /// The tokio runtime reads run on. Default: the runtime
    /// [`build`](Self::build) is called in.
    pub fn handle(mut self, handle: Handle) -> Self {
        self.handle = Some(handle);
        self
    }

    /// Bytes per GET for streams that do not set their own
    /// `io_combine_limit` (rounded down to whole blocks, at most
    /// [`pagestream::MAX_IO_COMBINE_LIMIT`] of them). Default
    /// [`DEFAULT_READ_BYTES`].
    pub fn read_bytes(mut self, bytes: usize) -> Self {
        self.read_bytes = bytes.max(1);
        self
    }

    /// GETs in flight for streams that do not set their own `max_ios`.
    /// Default [`DEFAULT_READS_IN_FLIGHT`].
    pub fn reads_in_flight(mut self, n: usize) -> Self {
        self.reads_in_flight = n.max(1);
        self
    }

    /// Whether streams over this engine put all their GETs in flight as
    /// soon as they need a page ([`EngineHints::full_look_ahead`]) rather
    /// than ramping up from one page, PostgreSQL's rule, which doubles the
    /// look-ahead once per GET it waits for: about 15 round trips before 64
    /// GETs of 4 MiB are in flight, longer than a whole scan of 256 MiB
    /// takes at 20 ms per round trip (`remote --serve nginx`'s
    /// `pagestream-ramp` row). The GETs of a stream dropped early are
    /// cancelled. Default `true`.
    pub fn full_look_ahead(mut self, on: bool) -> Self {
        self.full_look_ahead = on;
        self
    }

    /// When to hedge a GET. Default [`Hedging::default`].
    pub fn hedging(mut self, hedging: Hedging) -> Self {
        self.hedging = hedging;
        self
    }

    /// object_store's retry policy for the stores this engine builds from
    /// URLs ([`open_url`](ObjectStoreEngine::open_url)); a store passed to
    /// [`open`](ObjectStoreEngine::open) keeps its own. Default: 5 retries,
    /// backoff 50 ms to 2 s, none after 30 s.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// HTTP client options (timeouts, pool sizes) for the stores this
    /// engine builds from URLs. Default: object_store's.
    pub fn client_options(mut self, client: ClientOptions) -> Self {
        self.client = client;
        self
    }

    /// The engine.
    ///
    /// # Errors
    ///
    /// If no runtime was given and this is not called inside one.
    pub fn build(self) -> io::Result<ObjectStoreEngine> {
        let handle = match self.handle {
            Some(h) => h,
            None => Handle::try_current().map_err(|e| {
                io::Error::other(format!(
                    "the object-store engine needs a tokio runtime: build it inside one or give \
                     it a handle ({e})"
                ))
            })?,
        };
        Ok(ObjectStoreEngine {
            inner: Arc::new(Inner {
                handle,
                read_bytes: self.read_bytes,
                reads_in_flight: self.reads_in_flight,
                full_look_ahead: self.full_look_ahead,
                latencies: Latencies::new(self.hedging),
                retry: self.retry,
                client: self.client,
                stores: Mutex::new(HashMap::new()),
                counters: Counters::default(),
                running: AtomicUsize::new(0),
                hedges_in_flight: AtomicUsize::new(0),
            }),
        })
    }
}

impl ObjectStoreEngine {
    /// A builder with the defaults.
    pub fn builder() -> ObjectStoreEngineBuilder {
        ObjectStoreEngineBuilder::default()
    }

    /// An engine with the defaults on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// Outside a tokio runtime.
    pub fn new() -> io::Result<ObjectStoreEngine> {
        Self::builder().build()
    }

    /// Opens the object at `location` in `store`: its length and version
    /// from `head`. `name` names the store and the object in messages and
    /// in the pool: use its URL. Objects opened with the same name,
    /// location and version are one file to the pool (their streams share
    /// pages), so two stores must not be given the same name.
    ///
    /// # Errors
    ///
    /// The store's error for the `head`, naming the object: `NotFound` for
    /// a missing object or bucket.
    pub async fn open(
        &self,
        store: Arc<dyn ObjectStore>,
        location: ObjectPath,
        name: impl Into<String>,
    ) -> io::Result<ObjectFile> {
        let name = name.into();
        let meta = store
            .head(&location)
            .await
            .map_err(|e| store_error(&name, None, e))?;
        let version = match (&meta.e_tag, &meta.version) {
            (Some(e), _) => format!("etag {e}"),
            (None, Some(v)) => format!("version {v}"),
            (None, None) => format!("size {} modified {}", meta.size, meta.last_modified),
        };
        // Every GET asks for this version. `If-Match` compares entity tags
        // strongly: a weak ETag (`W/"…"`, what a server gives for content
        // it may transform) matches nothing, so a GET asking for one would
        // always fail. Such an object must instead be unmodified since its
        // modification time (to the second, over HTTP).
        // Without an ETag, the store's version id where it has one, and the
        // modification time in any case.
        let conditions = match meta.e_tag {
            Some(e) if !e.starts_with("W/") => GetOptions {
                if_match: Some(e),
                ..GetOptions::default()
            },
            _ => GetOptions {
                if_unmodified_since: Some(meta.last_modified),
                version: meta.version.clone(),
                ..GetOptions::default()
            },
        };
        Ok(ObjectFile::new(
            store, location, name, meta.size, conditions, &version,
        ))
    }

    /// Opens the object an URL names: `s3://bucket/key` (endpoint, region
    /// and credentials from the standard `AWS_*` environment variables:
    /// `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_REGION`, `AWS_ALLOW_HTTP`) or `http(s)://host/path`. Objects on
    /// the same bucket or server share one store (one connection pool).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a URL this crate cannot open, naming it; else as
    /// [`open`](Self::open).
    pub async fn open_url(&self, url: &str) -> io::Result<ObjectFile> {
        let p = parse(url)?;
        let store = {
            let mut stores = self.inner.stores.lock().unwrap_or_else(|e| e.into_inner());
            match stores.get(&p.store_key) {
                Some(s) => Arc::clone(s),
                None => {
                    let s = build_store(&p, &self.inner.retry, &self.inner.client)?;
                    stores.insert(p.store_key.clone(), Arc::clone(&s));
                    s
                }
            }
        };
        self.open(store, p.location, url).await
    }

    /// The engine's counters so far.
    pub fn stats(&self) -> ObjectStoreStats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let answered = get(&c.answered);
        ObjectStoreStats {
            gets: get(&c.gets),
            bytes: get(&c.bytes),
            hedged: get(&c.hedged),
            hedge_won: get(&c.hedge_won),
            aborted: get(&c.aborted),
            failed: get(&c.failed),
            broken_bodies: get(&c.broken_bodies),
            answered,
            first_byte_mean_ns: get(&c.first_byte_ns).checked_div(answered).unwrap_or(0),
            first_byte_max_ns: get(&c.first_byte_max_ns),
            hedge_threshold_ns: self
                .inner
                .latencies
                .threshold()
                .map_or(0, |d| d.as_nanos() as u64),
        }
    }

    /// The counters as [`EngineCounters`], the shape every engine reports.
    pub fn counters(&self) -> EngineCounters {
        let s = self.stats();
        EngineCounters(vec![
            ("gets", s.gets),
            ("bytes", s.bytes),
            ("hedged", s.hedged),
            ("hedge_won", s.hedge_won),
            ("aborted", s.aborted),
            ("failed", s.failed),
            ("broken_bodies", s.broken_bodies),
        ])
    }
}

impl IoEngine for ObjectStoreEngine {
    type File = ObjectFile;

    fn start_read(&self, file: &ObjectFile, req: ReadRequest) {
        let inner = Arc::clone(&self.inner);
        let file = Arc::clone(file.inner());
        // A runtime that has shut down drops the task, and with it the
        // request: the read ends cancelled, its frames empty.
        drop(self.inner.handle.spawn(read(inner, file, req)));
    }

    fn hints(&self, _file: &ObjectFile) -> EngineHints {
        // A GET fails as a whole, after object_store's retries: its error
        // is every page's, not a reason for a GET per page.
        EngineHints::new()
            .with_read_bytes(self.inner.read_bytes)
            .with_reads_in_flight(self.inner.reads_in_flight)
            .with_retry_blocks(false)
            .with_full_look_ahead(self.inner.full_look_ahead)
    }

    fn name(&self) -> &'static str {
        "object-store"
    }
}

/// Reads `req` to its end, or until no stream wants it.
async fn read(inner: Arc<Inner>, file: Arc<FileInner>, mut req: ReadRequest) {
    inner.running.fetch_add(1, Ordering::Relaxed);
    let _in_flight = InFlight(Arc::clone(&inner));
    let abandoned = req.abandoned();
    tokio::pin!(abandoned);
    loop {
        let result = tokio::select! {
            biased;
            () = &mut abandoned => {
                bump(&inner.counters.aborted, 1);
                return; // dropping `req` cancels it
            }
            r = fetch(&inner, &file, &mut req) => r,
        };
        if result.is_err() {
            bump(&inner.counters.failed, 1);
        }
        match req.complete(result) {
            Some(rest) => {
                // Pages the finished part published may be held or dropped
                // by anyone at any time; only the rest's pins count.
                abandoned.set(rest.abandoned());
                req = rest;
            }
            None => return,
        }
    }
}

/// One attempt at the rest of `req`: a range GET (hedged if it is slow to
/// answer) whose body is copied into the frames. Returns the bytes copied,
/// which may be short of the request if the body broke off (the rest is
/// then asked for again as the request's remainder).
async fn fetch(inner: &Inner, file: &FileInner, req: &mut ReadRequest) -> io::Result<usize> {
    // A read of a short last page asks for the whole block; the object
    // ends inside it.
    let start = req.offset();
    let range = start..(start + req.len_bytes() as u64).min(file.len);
    if range.is_empty() {
        return Ok(0); // at the end: the stream says what that means
    }
    let sent = Instant::now();
    let primary = get(inner, file, range.clone());
    if inner.latencies.threshold().is_none() {
        let res = answer(inner, file, &range, sent, primary.await)?;
        return copy_body(inner, file, &range, res.into_stream(), req).await;
    }
    let waiting = inner.latencies.sent();
    tokio::pin!(primary);
    let _hedge = tokio::select! {
        r = &mut primary => {
            drop(waiting);
            let res = answer(inner, file, &range, sent, r)?;
            return copy_body(inner, file, &range, res.into_stream(), req).await;
        }
        slot = hedge_due(inner, sent, &waiting) => slot,
    };
    // Hedged: no longer one of its cohort's GETs waiting to answer.
    drop(waiting);
    // The first GET has not answered: send it again, and keep whichever
    // copy finishes first. Both collect their bodies apart from the frames
    // (only one may fill them), and the loser is dropped, which cancels it.
    bump(&inner.counters.hedged, 1);
    let hedge = get(inner, file, range.clone());
    let first = collect(inner, file, &range, primary, sent);
    let second = collect(inner, file, &range, hedge, Instant::now());
    tokio::pin!(first, second);
    let (body, won) = tokio::select! {
        r = &mut first => match r {
            Ok(b) => (b, false),
            // One copy failing is not the read failing while the other runs.
            Err(_) => (second.await?, true),
        },
        r = &mut second => match r {
            Ok(b) => (b, true),
            Err(_) => (first.await?, false),
        },
    };
    if won {
        bump(&inner.counters.hedge_won, 1);
    }
    copy_body(
        inner,
        file,
        &range,
        futures::stream::iter(body.into_iter().map(Ok)),
        req,
    )
    .await
}

/// Reads in flight per hedge in flight, at most.
const HEDGE_BUDGET: usize = 10;

/// A hedge in flight, counted in [`Inner::hedges_in_flight`] until dropped.
struct HedgeSlot<'a>(&'a Inner);

impl<'a> HedgeSlot<'a> {
    /// A slot, if fewer than one read in [`HEDGE_BUDGET`] (and at least
    /// one read) is hedged now.
    fn take(inner: &'a Inner) -> Option<HedgeSlot<'a>> {
        let reads = inner.running.load(Ordering::Relaxed);
        let cap = (reads / HEDGE_BUDGET).max(1);
        let mut cur = inner.hedges_in_flight.load(Ordering::Relaxed);
        loop {
            if cur >= cap {
                return None;
            }
            match inner.hedges_in_flight.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(HedgeSlot(inner)),
                Err(c) => cur = c,
            }
        }
    }
}

impl Drop for HedgeSlot<'_> {
    fn drop(&mut self) {
        self.0.hedges_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A read in flight, counted in [`Inner::running`] until dropped.
struct InFlight(Arc<Inner>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Resolves, with a hedge slot, when a GET sent at `sent` that has not
/// answered is due to be hedged: when its wait reaches the threshold the
/// latencies observed *by then* give, it is straggling (among the last of
/// the GETs sent with it to answer, or they have all stopped answering; see
/// [`Hedging`]), and the hedge budget has room (at most one read in
/// [`HEDGE_BUDGET`] hedged at a time, so a store that slows down as a whole
/// is not sent every GET twice). All three are looked at again at least
/// every [`Hedging::floor`]: a GET sent before any latency was known (the
/// first GETs of a scan, sent together) would otherwise wait for the
/// initial guess, a second, while the GETs sent with it have long shown
/// what a normal answer takes; and stragglers that come together take the
/// budget's slots in turn.
async fn hedge_due<'a>(inner: &'a Inner, sent: Instant, waiting: &Waiting<'_>) -> HedgeSlot<'a> {
    loop {
        let Some(threshold) = inner.latencies.threshold() else {
            return std::future::pending().await;
        };
        let due = sent + threshold;
        let now = Instant::now();
        if now >= due && waiting.straggling(threshold) {
            if let Some(slot) = HedgeSlot::take(inner) {
                return slot;
            }
        }
        // Before it is due, look again early only while the threshold is
        // the initial guess, which the first latencies will replace.
        let step = inner.latencies.recheck();
        let wake = if now >= due {
            now + step
        } else if inner.latencies.learned() {
            due
        } else {
            due.min(now + step)
        };
        tokio::time::sleep_until(wake.into()).await;
    }
}

impl Inner {
    fn answered(&self, d: Duration) {
        self.latencies.record(d);
        let ns = d.as_nanos() as u64;
        bump(&self.counters.answered, 1);
        bump(&self.counters.first_byte_ns, ns);
        self.counters
            .first_byte_max_ns
            .fetch_max(ns, Ordering::Relaxed);
    }
}

/// A range GET of the object's version at open.
async fn get(
    inner: &Inner,
    file: &FileInner,
    range: std::ops::Range<u64>,
) -> object_store::Result<GetResult> {
    bump(&inner.counters.gets, 1);
    let opts = GetOptions {
        range: Some(GetRange::Bounded(range)),
        ..file.conditions.clone()
    };
    file.store.get_opts(&file.location, opts).await
}

/// A GET's answer, recorded as answered `sent` ago, or its error naming
/// the object and `range`.
fn answer(
    inner: &Inner,
    file: &FileInner,
    range: &std::ops::Range<u64>,
    sent: Instant,
    r: object_store::Result<GetResult>,
) -> io::Result<GetResult> {
    let res = r.map_err(|e| store_error(&file.name, Some(range), e))?;
    inner.answered(sent.elapsed());
    check_range(file, range, &res)?;
    Ok(res)
}

/// Copies `body`, the bytes of `range`, into `req` as it arrives, up to
/// the range's end.
async fn copy_body(
    inner: &Inner,
    file: &FileInner,
    range: &std::ops::Range<u64>,
    mut body: impl futures::Stream<Item = object_store::Result<bytes::Bytes>> + Unpin,
    req: &mut ReadRequest,
) -> io::Result<usize> {
    let want = (range.end - range.start) as usize;
    let mut at = 0;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(bytes) => {
                let n = req.copy_at(at, &bytes[..bytes.len().min(want - at)]);
                at += n;
                bump(&inner.counters.bytes, n as u64);
                if at == want {
                    break;
                }
            }
            // The bytes so far are kept; the rest is the remainder's, asked
            // for again (object_store has already retried the body).
            Err(_) if at > 0 => {
                bump(&inner.counters.broken_bodies, 1);
                return Ok(at);
            }
            Err(e) => return Err(store_error(&file.name, Some(range), e)),
        }
    }
    check_complete(file, range, at)
}

/// Answers and collects a GET's body (for hedged reads), recording when it
/// answered.
async fn collect(
    inner: &Inner,
    file: &FileInner,
    range: &std::ops::Range<u64>,
    get: impl std::future::Future<Output = object_store::Result<GetResult>>,
    sent: Instant,
) -> io::Result<Vec<bytes::Bytes>> {
    let res = answer(inner, file, range, sent, get.await)?;
    let mut body = res.into_stream();
    let mut chunks = Vec::new();
    while let Some(chunk) = body.next().await {
        chunks.push(chunk.map_err(|e| store_error(&file.name, Some(range), e))?);
    }
    Ok(chunks)
}

/// The store answered a range other than the one asked for (an object
/// shorter than at open answers with a shorter range).
fn check_range(file: &FileInner, range: &std::ops::Range<u64>, res: &GetResult) -> io::Result<()> {
    if res.meta.size < file.len {
        return Err(short_object(file, range, res.meta.size));
    }
    if res.range != *range {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: GET bytes {}..{}: the store answered bytes {}..{}",
                file.name, range.start, range.end, res.range.start, res.range.end
            ),
        ));
    }
    Ok(())
}

/// A body that ended before the range did.
fn check_complete(file: &FileInner, range: &std::ops::Range<u64>, got: usize) -> io::Result<usize> {
    if got == 0 && range.end > range.start {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{}: GET bytes {}..{}: the body was empty",
                file.name, range.start, range.end
            ),
        ));
    }
    Ok(got)
}

fn short_object(file: &FileInner, range: &std::ops::Range<u64>, now: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "{}: GET bytes {}..{}: the object is {now} bytes, shorter than the {} it had when \
             opened",
            file.name, range.start, range.end, file.len
        ),
    )
}

/// The `io::ErrorKind` of an object_store error. A `Generic` error is
/// classified by the object_store error it wraps, if it wraps one: a GET
/// whose body failed and was retried reports the 404 of a vanished object
/// as `Generic` around `NotFound`.
fn error_kind(e: &object_store::Error) -> io::ErrorKind {
    match e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::Precondition { .. } => io::ErrorKind::InvalidData,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        object_store::Error::Generic { source, .. } => source
            .downcast_ref::<object_store::Error>()
            .map_or(io::ErrorKind::Other, error_kind),
        _ => io::ErrorKind::Other,
    }
}

/// An object_store error as an `io::Error` naming the object and range.
pub(crate) fn store_error(
    name: &str,
    range: Option<&std::ops::Range<u64>>,
    e: object_store::Error,
) -> io::Error {
    let kind = error_kind(&e);
    let what = match range {
        Some(r) => format!("GET bytes {}..{}", r.start, r.end),
        None => "HEAD".to_owned(),
    };
    io::Error::new(kind, format!("{name}: {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vanished object's 404 that object_store wraps in `Generic` (a GET
    /// whose body failed and was retried) is still `NotFound`; other
    /// wrapped store errors keep their kinds, anything else is `Other`.
    #[test]
    fn a_wrapped_store_error_keeps_its_kind() {
        let not_found = || object_store::Error::NotFound {
            path: "t".into(),
            source: "404 Not Found".into(),
        };
        let wrap = |e: object_store::Error| object_store::Error::Generic {
            store: "S3",
            source: Box::new(e),
        };
        let e = store_error("s3://b/t", Some(&(0..8192)), wrap(not_found()));
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        assert!(
            e.to_string().starts_with("s3://b/t: GET bytes 0..8192: "),
            "{e}"
        );
        let twice = store_error("s3://b/t", None, wrap(wrap(not_found())));
        assert_eq!(twice.kind(), io::ErrorKind::NotFound, "{twice}");
        let denied = object_store::Error::PermissionDenied {
            path: "t".into(),
            source: "403 Forbidden".into(),
        };
        let e = store_error("s3://b/t", None, wrap(denied));
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        let reset = object_store::Error::Generic {
            store: "S3",
            source: "connection reset".into(),
        };
        assert_eq!(
            store_error("s3://b/t", None, reset).kind(),
            io::ErrorKind::Other
        );
    }
}
