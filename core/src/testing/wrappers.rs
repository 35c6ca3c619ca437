//! Engine wrappers for deterministic tests and simulations: latency,
//! concurrency caps, faults, stalls and panicking completions. Each wraps
//! any engine.

use super::{SplitMix, Timer};
use crate::engine::{EngineHints, IoEngine, ReadFilter, ReadRequest};
use crate::BlockNumber;
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

// Test utilities run on real threads, never under loom: plain std.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Latency a [`Delayed`] engine achieved: from `start_read` to the end of
/// the read, as the stream sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatencyStats {
    /// Reads measured.
    pub reads: u64,
    /// Mean latency.
    pub mean: Duration,
    /// Smallest latency.
    pub min: Duration,
    /// Largest latency.
    pub max: Duration,
}

#[derive(Debug)]
struct LatencyCounters {
    reads: AtomicU64,
    sum_ns: AtomicU64,
    min_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl LatencyCounters {
    fn new() -> Self {
        LatencyCounters {
            reads: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            min_ns: AtomicU64::new(u64::MAX),
            max_ns: AtomicU64::new(0),
        }
    }

    fn record(&self, d: Duration) {
        let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.min_ns.fetch_min(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    fn snapshot(&self) -> LatencyStats {
        let reads = self.reads.load(Ordering::Relaxed);
        if reads == 0 {
            return LatencyStats::default();
        }
        LatencyStats {
            reads,
            mean: Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed) / reads),
            min: Duration::from_nanos(self.min_ns.load(Ordering::Relaxed)),
            max: Duration::from_nanos(self.max_ns.load(Ordering::Relaxed)),
        }
    }
}

/// Adds a fixed latency (plus optional random jitter, which reorders
/// completions) to every read of the inner engine, through an injected
/// [`Timer`]. Reports the latency it achieved ([`Delayed::latency`]).
///
/// It simulates remote storage: each read costs a round trip however large
/// it is, reads overlap freely, and there is no kernel read-ahead.
#[derive(Clone)]
pub struct Delayed<E> {
    inner: E,
    timer: Arc<dyn Timer>,
    latency: Duration,
    jitter: Duration,
    rng: Arc<Mutex<SplitMix>>,
    counters: Arc<LatencyCounters>,
}

impl<E: IoEngine> fmt::Debug for Delayed<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delayed")
            .field("inner", &self.inner.name())
            .field("latency", &self.latency)
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

impl<E> Delayed<E> {
    /// Wraps `inner`: each read starts `latency` after it is submitted.
    pub fn new(inner: E, timer: Arc<dyn Timer>, latency: Duration) -> Self {
        Delayed {
            inner,
            timer,
            latency,
            jitter: Duration::ZERO,
            rng: Arc::new(Mutex::new(SplitMix::new(1))),
            counters: Arc::new(LatencyCounters::new()),
        }
    }

    /// Adds a uniformly random extra delay in `0..jitter` per read, from a
    /// seeded generator: completions then arrive out of submission order.
    pub fn with_jitter(mut self, jitter: Duration, seed: u64) -> Self {
        self.jitter = jitter;
        self.rng = Arc::new(Mutex::new(SplitMix::new(seed)));
        self
    }

    /// The latency achieved so far.
    pub fn latency(&self) -> LatencyStats {
        self.counters.snapshot()
    }

    /// The inner engine.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

#[deny(clippy::missing_trait_methods)]
impl<E> IoEngine for Delayed<E>
where
    E: IoEngine + Clone + Send + 'static,
    E::File: Clone + Send + 'static,
{
    type File = E::File;

    fn start_read(&self, file: &E::File, mut req: ReadRequest) {
        let submitted = Instant::now();
        let mut delay = self.latency;
        if !self.jitter.is_zero() {
            let j = lock(&self.rng).below(self.jitter.as_nanos() as u64);
            delay += Duration::from_nanos(j);
        }
        let counters = Arc::clone(&self.counters);
        req.on_finish(move |_| counters.record(submitted.elapsed()));
        let inner = self.inner.clone();
        let file = file.clone();
        self.timer.at(
            submitted + delay,
            Box::new(move || inner.start_read(&file, req)),
        );
    }

    fn hints(&self, file: &E::File) -> EngineHints {
        self.inner.hints(file)
    }

    fn advise(&self, file: &E::File, offset: u64, len: u64) -> bool {
        self.inner.advise(file, offset, len)
    }

    fn help(&self, file: &E::File) -> bool {
        self.inner.help(file)
    }

    fn name(&self) -> &'static str {
        "delayed"
    }
}

/// Caps the reads the inner engine has in flight; the rest queue in
/// submission order. Records the most it saw in flight.
#[derive(Clone)]
pub struct Capped<E: IoEngine> {
    inner: E,
    shared: Arc<CapShared<E::File>>,
}

struct CapShared<F> {
    max: usize,
    state: Mutex<CapState<F>>,
    max_seen: AtomicU64,
}

struct CapState<F> {
    in_flight: usize,
    queue: VecDeque<(F, ReadRequest)>,
}

impl<E: IoEngine> fmt::Debug for Capped<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capped")
            .field("inner", &self.inner.name())
            .field("max", &self.shared.max)
            .finish_non_exhaustive()
    }
}

impl<E: IoEngine> Capped<E> {
    /// Wraps `inner`, allowing at most `max` (≥ 1) reads in flight.
    pub fn new(inner: E, max: usize) -> Self {
        Capped {
            inner,
            shared: Arc::new(CapShared {
                max: max.max(1),
                state: Mutex::new(CapState {
                    in_flight: 0,
                    queue: VecDeque::new(),
                }),
                max_seen: AtomicU64::new(0),
            }),
        }
    }

    /// The most reads seen in flight in the inner engine.
    pub fn max_in_flight(&self) -> u64 {
        self.shared.max_seen.load(Ordering::Relaxed)
    }
}

fn cap_launch<E>(inner: E, shared: Arc<CapShared<E::File>>, file: E::File, mut req: ReadRequest)
where
    E: IoEngine + Clone + Send + 'static,
    E::File: Clone + Send + 'static,
{
    let (inner2, shared2) = (inner.clone(), Arc::clone(&shared));
    req.on_finish(move |_| {
        let next = {
            let mut st = lock(&shared2.state);
            let next = st.queue.pop_front();
            if next.is_none() {
                st.in_flight -= 1;
            }
            next
        };
        if let Some((f, r)) = next {
            cap_launch(inner2, shared2, f, r);
        }
    });
    inner.start_read(&file, req);
}

#[deny(clippy::missing_trait_methods)]
impl<E> IoEngine for Capped<E>
where
    E: IoEngine + Clone + Send + 'static,
    E::File: Clone + Send + 'static,
{
    type File = E::File;

    fn start_read(&self, file: &E::File, req: ReadRequest) {
        {
            let mut st = lock(&self.shared.state);
            if st.in_flight >= self.shared.max {
                st.queue.push_back((file.clone(), req));
                return;
            }
            st.in_flight += 1;
            self.shared
                .max_seen
                .fetch_max(st.in_flight as u64, Ordering::Relaxed);
        }
        cap_launch(
            self.inner.clone(),
            Arc::clone(&self.shared),
            file.clone(),
            req,
        );
    }

    fn hints(&self, file: &E::File) -> EngineHints {
        self.inner.hints(file)
    }

    fn advise(&self, file: &E::File, offset: u64, len: u64) -> bool {
        self.inner.advise(file, offset, len)
    }

    fn help(&self, file: &E::File) -> bool {
        self.inner.help(file)
    }

    fn name(&self) -> &'static str {
        "capped"
    }
}

/// The faults a [`Faulty`] engine injects.
#[derive(Debug)]
pub struct FaultPlan {
    eio: Mutex<HashSet<BlockNumber>>,
    /// Chance of a short read, in 1/1000.
    short_per_mille: u64,
    rng: Mutex<SplitMix>,
    injected_eio: AtomicU64,
    injected_short: AtomicU64,
}

impl ReadFilter for FaultPlan {
    fn filter(&self, req: &ReadRequest, result: io::Result<usize>) -> io::Result<usize> {
        let n = match result {
            Ok(n) => n,
            e @ Err(_) => return e,
        };
        let first = req.first_block();
        let last = first + req.nblocks() as u64;
        if lock(&self.eio).iter().any(|b| (first..last).contains(b)) {
            self.injected_eio.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::from_raw_os_error(5));
        }
        if n > 1 && self.short_per_mille > 0 {
            let mut rng = lock(&self.rng);
            if rng.below(1000) < self.short_per_mille {
                self.injected_short.fetch_add(1, Ordering::Relaxed);
                return Ok(1 + rng.below(n as u64 - 1) as usize);
            }
        }
        Ok(n)
    }
}

/// Injects faults into the inner engine's results: EIO for any read that
/// covers a chosen block (every time, so the block fails alone too), and
/// random short reads (any length from one byte).
#[derive(Clone)]
pub struct Faulty<E> {
    inner: E,
    plan: Arc<FaultPlan>,
}

impl<E: IoEngine> fmt::Debug for Faulty<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faulty")
            .field("inner", &self.inner.name())
            .field("plan", &self.plan)
            .finish()
    }
}

impl<E> Faulty<E> {
    /// Wraps `inner` with no faults yet.
    pub fn new(inner: E) -> Self {
        Faulty {
            inner,
            plan: Arc::new(FaultPlan {
                eio: Mutex::new(HashSet::new()),
                short_per_mille: 0,
                rng: Mutex::new(SplitMix::new(7)),
                injected_eio: AtomicU64::new(0),
                injected_short: AtomicU64::new(0),
            }),
        }
    }

    /// Fails every read covering `block` with EIO.
    pub fn fail_block(self, block: BlockNumber) -> Self {
        lock(&self.plan.eio).insert(block);
        self
    }

    /// Stops failing `block`.
    pub fn heal_block(&self, block: BlockNumber) {
        lock(&self.plan.eio).remove(&block);
    }

    /// Makes `per_mille`/1000 of reads short, with a seeded generator.
    pub fn short_reads(self, per_mille: u64, seed: u64) -> Self {
        let plan = FaultPlan {
            eio: Mutex::new(lock(&self.plan.eio).clone()),
            short_per_mille: per_mille.min(1000),
            rng: Mutex::new(SplitMix::new(seed)),
            injected_eio: AtomicU64::new(0),
            injected_short: AtomicU64::new(0),
        };
        Faulty {
            inner: self.inner,
            plan: Arc::new(plan),
        }
    }

    /// EIOs injected so far.
    pub fn injected_eio(&self) -> u64 {
        self.plan.injected_eio.load(Ordering::Relaxed)
    }

    /// Short reads injected so far.
    pub fn injected_short(&self) -> u64 {
        self.plan.injected_short.load(Ordering::Relaxed)
    }
}

#[deny(clippy::missing_trait_methods)]
impl<E: IoEngine> IoEngine for Faulty<E> {
    type File = E::File;

    fn start_read(&self, file: &E::File, mut req: ReadRequest) {
        req.add_filter(Arc::clone(&self.plan) as Arc<dyn ReadFilter>);
        self.inner.start_read(file, req);
    }

    fn hints(&self, file: &E::File) -> EngineHints {
        self.inner.hints(file)
    }

    fn advise(&self, file: &E::File, offset: u64, len: u64) -> bool {
        self.inner.advise(file, offset, len)
    }

    fn help(&self, file: &E::File) -> bool {
        self.inner.help(file)
    }

    fn name(&self) -> &'static str {
        "faulty"
    }
}

/// Gives the `k`th read started through it (counting from 0) a finish hook
/// that panics, so that a test can check that a panic while a read
/// completes — on whatever thread the inner engine completes it — loses no
/// read and hangs no stream.
#[derive(Clone)]
pub struct PanicOnFinish<E> {
    inner: E,
    k: u64,
    started: Arc<AtomicU64>,
}

impl<E: IoEngine> fmt::Debug for PanicOnFinish<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PanicOnFinish")
            .field("inner", &self.inner.name())
            .field("k", &self.k)
            .field("started", &self.started())
            .finish()
    }
}

impl<E> PanicOnFinish<E> {
    /// Wraps `inner`; read number `k` will panic when it finishes.
    pub fn new(inner: E, k: u64) -> Self {
        PanicOnFinish {
            inner,
            k,
            started: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Reads started so far.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }
}

#[deny(clippy::missing_trait_methods)]
impl<E: IoEngine> IoEngine for PanicOnFinish<E> {
    type File = E::File;

    fn start_read(&self, file: &E::File, mut req: ReadRequest) {
        if self.started.fetch_add(1, Ordering::Relaxed) == self.k {
            req.on_finish(|_| panic!("PanicOnFinish: this read's hook panics on purpose"));
        }
        self.inner.start_read(file, req);
    }

    fn hints(&self, file: &E::File) -> EngineHints {
        self.inner.hints(file)
    }

    fn advise(&self, file: &E::File, offset: u64, len: u64) -> bool {
        self.inner.advise(file, offset, len)
    }

    fn help(&self, file: &E::File) -> bool {
        self.inner.help(file)
    }

    fn name(&self) -> &'static str {
        "panic-on-finish"
    }
}

type Held<F> = Arc<Mutex<Vec<(F, ReadRequest)>>>;

/// Holds every read covering a chosen block (or every read) and never
/// completes it, until [`Stall::cancel_all`] drops them (the reads then end
/// as cancelled) or [`Stall::release_all`] passes them on.
///
/// Holding every read and releasing them in rounds turns a latency-bound
/// run into a deterministic one: each round is one round trip, and what is
/// held when a stream waits is exactly what it keeps in flight.
#[derive(Clone)]
pub struct Stall<E: IoEngine> {
    inner: E,
    /// `None`: every read.
    blocks: Option<Arc<HashSet<BlockNumber>>>,
    held: Held<E::File>,
}

impl<E: IoEngine> fmt::Debug for Stall<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stall")
            .field("inner", &self.inner.name())
            .field("blocks", &self.blocks)
            .finish_non_exhaustive()
    }
}

impl<E: IoEngine> Stall<E> {
    /// Wraps `inner`, stalling reads that cover any of `blocks`.
    pub fn new(inner: E, blocks: impl IntoIterator<Item = BlockNumber>) -> Self {
        Stall {
            inner,
            blocks: Some(Arc::new(blocks.into_iter().collect())),
            held: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Wraps `inner`, holding every read.
    pub fn every_read(inner: E) -> Self {
        Stall {
            inner,
            blocks: None,
            held: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Reads held right now.
    pub fn held(&self) -> usize {
        lock(&self.held).len()
    }

    /// Drops every held read: each ends as cancelled, its frames empty.
    pub fn cancel_all(&self) {
        let held = std::mem::take(&mut *lock(&self.held));
        drop(held);
    }

    /// Takes the held read at `index` (held reads are in the order they
    /// were started, but for the one taken, whose place the last one
    /// takes), for the caller to complete as it likes: a test that
    /// decides the order, size and outcome of every completion. A
    /// remainder it gives back with [`start_read`](IoEngine::start_read)
    /// is held again (under [`every_read`](Self::every_read)).
    pub fn take(&self, index: usize) -> Option<(E::File, ReadRequest)> {
        let mut held = lock(&self.held);
        (index < held.len()).then(|| held.swap_remove(index))
    }

    /// Passes every held read to the inner engine.
    pub fn release_all(&self) {
        let held = std::mem::take(&mut *lock(&self.held));
        for (f, r) in held {
            self.inner.start_read(&f, r);
        }
    }
}

#[deny(clippy::missing_trait_methods)]
impl<E> IoEngine for Stall<E>
where
    E: IoEngine,
    E::File: Clone,
{
    type File = E::File;

    fn start_read(&self, file: &E::File, req: ReadRequest) {
        let first = req.first_block();
        let last = first + req.nblocks() as u64;
        let hold = match &self.blocks {
            None => true,
            Some(blocks) => blocks.iter().any(|b| (first..last).contains(b)),
        };
        if hold {
            lock(&self.held).push((file.clone(), req));
        } else {
            self.inner.start_read(file, req);
        }
    }

    fn hints(&self, file: &E::File) -> EngineHints {
        self.inner.hints(file)
    }

    fn advise(&self, file: &E::File, offset: u64, len: u64) -> bool {
        self.inner.advise(file, offset, len)
    }

    fn help(&self, file: &E::File) -> bool {
        self.inner.help(file)
    }

    fn name(&self) -> &'static str {
        "stall"
    }
}
