//! A deterministic simulation of streams on one pool, in the manner of
//! TigerBeetle's and FoundationDB's simulators: the real stream, planner,
//! pool and requests run against a simulated engine on a virtual clock,
//! driven by one seed, so that any failure replays exactly from its seed.
//!
//! One run ([`run`]) draws from its seed:
//!
//! - **the pool**: 1 to 256 frames of 512 bytes, shared by 1 to 6 streams
//!   over one or two stamped files;
//! - **the engine** ([`SimEngine`]): every read completes at a virtual time
//!   drawn from a latency distribution with a long tail, so completions
//!   arrive out of order; now and then a read is short (its remainder goes
//!   back in the queue), fails with EIO, is retried by the engine after
//!   EAGAIN, or is dropped (cancelled); a read no stream wants any more
//!   ([`ReadRequest::is_wanted`]) is dropped half the time; by seed, none,
//!   half or all of its reads say they were served from the page cache,
//!   and none, a tenth or half of its reads end (with the same faults)
//!   inside `start_read`, as engines that try a read inline first do.
//!   Its hints vary by seed: `retry_blocks`, `full_look_ahead`, `advice`
//!   (the engine then takes it), `cached_reads`, and `help` (a stream about
//!   to wait completes one of its file's reads itself);
//! - **the streams**: `max_ios`, `io_combine_limit`, gaps, fast path,
//!   `full`, a ring, a yield budget in items (a time budget would make a
//!   seed's polls depend on the real clock); sources forward, backward,
//!   zigzag, random, sparse or dense ascending, with duplicates and blocks
//!   past the end, each block carrying its stream, the stream's resets and
//!   its position as data; a source is not fused (asked again after its end
//!   it names a block, which the oracle reports);
//! - **the consumer's behaviour**: a deterministic single-threaded executor
//!   polls only the streams that were woken, in a seeded order; each
//!   consumer holds a few guards (some past its stream's drop), and now
//!   and then resets its stream, drops it with reads in flight, or closes
//!   it.
//!
//! The oracle: every page handed out holds its block's bytes (checked again
//! when the consumer lets it go: nothing may write a pinned frame), in
//! source order, each block exactly once per stream and source (its data
//! names the stream, its resets and its position); errors come only in
//! place and only for a cause: past the end, or an EIO or a cancellation
//! the engine injected into a read for that stream, since its last reset,
//! covering that block, or the pool exhausted (every frame pinned or being
//! read as the error is handed out; the same block comes next); a read dropped because no stream wanted it any more may
//! cause no error at all. At the end no pin is held, no frame is in IO, and
//! scans of every file and of a new file twice the pool's size through the
//! pool read every block right. A stream that waits while nothing can wake
//! it (no stream woken, no read pending) is a hang, found on the virtual
//! clock, not by a timeout.
//!
//! Mutants: built with `RUSTFLAGS='--cfg pagestream_mutant="unfused"'` (the
//! planner asks a source again after its end), `"past_end"` (a block past
//! the end goes to the engine), `"swap"` or `"leak_pin"`, the simulation
//! must fail.
//!
//! `cargo test -p pagestream --test simulation` runs 1,000 seeds;
//! `PAGESTREAM_SIM_SEEDS` (how many) and `PAGESTREAM_SIM_SEED` (the first)
//! run others, and a failure prints the command that replays it.

use super::stamp;
use super::{MemEngine, MemFile, SplitMix};
use crate::{
    BlockSource, BufferPool, CachedReads, EngineFile, EngineHints, IoEngine, ReadError,
    ReadRequest, ReadStream, RingSize, StreamStats, YieldBudget,
};
use futures::Stream;
use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

/// Block size of the simulated files.
const BS: usize = 512;

/// What a run did, for the caller's summary.
#[derive(Debug, Clone, Default)]
pub struct SimReport {
    /// Pages handed out and checked.
    pub pages: u64,
    /// Errors handed out for blocks past the end.
    pub past_end: u64,
    /// Errors handed out for blocks whose read failed or was cancelled.
    pub failed: u64,
    /// `PoolExhausted` errors handed out.
    pub exhausted: u64,
    /// Reads the engine was given (remainders of short reads included).
    pub reads: u64,
    /// Faults injected: EIO, EAGAIN, cancellations, short reads.
    pub faults: u64,
    /// Streams reset, dropped, closed.
    pub chaos: u64,
    /// Reads no stream wanted any more, dropped by the engine.
    pub abandoned: u64,
    /// Polls with a new waker (the old one then wakes nothing the
    /// executor looks at).
    pub waker_swaps: u64,
    /// Reads the engine ended inside `start_read`.
    pub inline: u64,
    /// The virtual clock at the end.
    pub virtual_time: u64,
}

/// A run that broke the oracle: what, with the seed that replays it.
#[derive(Debug, Clone)]
pub struct SimFailure {
    /// The seed.
    pub seed: u64,
    /// What went wrong.
    pub what: String,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "simulation seed {} failed: {}\nreplay: {}",
            self.seed,
            self.what,
            replay_command(self.seed)
        )
    }
}

impl std::error::Error for SimFailure {}

/// The command that replays `seed`.
pub fn replay_command(seed: u64) -> String {
    format!(
        "PAGESTREAM_SIM_SEED={seed} PAGESTREAM_SIM_SEEDS=1 cargo test -p pagestream \
         --test simulation -- --nocapture"
    )
}

/// Which stream a read is for: its index, and how many times it had been
/// reset when it started the read.
type Owner = (usize, u32);

/// A read the simulated engine holds until its virtual time comes.
struct Pending {
    due: u64,
    /// Order of submission, to break ties deterministically.
    seq: u64,
    owner: Owner,
    file: MemFile,
    req: ReadRequest,
}

/// How often each fault strikes, per mille of completions.
#[derive(Debug, Clone, Copy)]
struct Faults {
    eio: u64,
    eagain: u64,
    cancel: u64,
    short: u64,
}

struct EngineState {
    now: u64,
    seq: u64,
    queue: Vec<Pending>,
    rng: SplitMix,
    faults: Faults,
    /// Latency: a uniform base, and now and then a long tail.
    base_latency: u64,
    tail_per_mille: u64,
    /// The stream being polled: reads started now are its.
    current: Owner,
    /// Blocks covered by a read that failed (EIO) or was cancelled, with
    /// the stream the read was for: an error of that kind for that stream
    /// and block is explained.
    eio: BTreeSet<(Owner, u64)>,
    cancelled: BTreeSet<(Owner, u64)>,
    report: SimReport,
    /// Reads reported served from the page cache, per mille, drawn from
    /// their own generator (so that the other draws of a seed stay as
    /// they were).
    cached_per_mille: u64,
    cached_rng: SplitMix,
    /// Reads ended inside `start_read`, per mille, by their own generator
    /// (for the decision; their faults are drawn as any read's).
    inline_per_mille: u64,
    inline_rng: SplitMix,
}

/// The simulated engine: holds every read until the simulation completes
/// it on its virtual clock (see the module docs).
#[derive(Clone)]
pub struct SimEngine {
    state: Arc<Mutex<EngineState>>,
    hints: EngineHints,
}

impl fmt::Debug for SimEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimEngine").finish_non_exhaustive()
    }
}

impl SimEngine {
    fn lock(&self) -> std::sync::MutexGuard<'_, EngineState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn latency(st: &mut EngineState) -> u64 {
        let base = 1 + st.rng.below(st.base_latency);
        if st.rng.below(1000) < st.tail_per_mille {
            base * (10 + st.rng.below(90))
        } else {
            base
        }
    }

    fn push(st: &mut EngineState, owner: Owner, file: MemFile, req: ReadRequest) {
        let due = st.now + Self::latency(st);
        st.seq += 1;
        let seq = st.seq;
        st.report.reads += 1;
        st.queue.push(Pending {
            due,
            seq,
            owner,
            file,
            req,
        });
    }

    /// Whether a read is waiting.
    fn idle(&self) -> bool {
        self.lock().queue.is_empty()
    }

    /// Completes the next read due (moving the clock to it), or one of the
    /// reads due within a few ticks of it, chosen at random (reordering).
    /// Returns false if none was pending.
    fn complete_one(&self) -> bool {
        self.complete_where(None)
    }

    /// [`complete_one`](Self::complete_one) among the reads of `file` only,
    /// if given.
    fn complete_where(&self, file: Option<&MemFile>) -> bool {
        let mut st = self.lock();
        let of = |p: &Pending| file.is_none_or(|f| p.file.id() == f.id());
        let Some(first) = st
            .queue
            .iter()
            .filter(|p| of(p))
            .map(|p| (p.due, p.seq))
            .min()
        else {
            return false;
        };
        let window = first.0 + st.rng.below(4);
        let near: Vec<usize> = (0..st.queue.len())
            .filter(|&i| of(&st.queue[i]) && st.queue[i].due <= window)
            .collect();
        let i = near[st.rng.below(near.len() as u64) as usize];
        let Pending {
            due,
            owner,
            file,
            req,
            ..
        } = st.queue.swap_remove(i);
        st.now = st.now.max(due);
        self.finish(st, owner, file, req);
        true
    }

    /// Ends `req`, taken from the queue or just started (an engine that
    /// completes a read inline, in `start_read`): a read no stream wants
    /// any more is dropped half the time; else it fails (EIO), is
    /// cancelled, is retried later (EAGAIN), or is read, maybe short (its
    /// remainder queued). The request is completed or dropped outside the
    /// lock: that runs the stream's hooks and wakes its task.
    fn finish(
        &self,
        mut st: MutexGuard<'_, EngineState>,
        owner: Owner,
        file: MemFile,
        req: ReadRequest,
    ) {
        // A read no stream wants any more (its streams reset, closed or
        // dropped) may be dropped, as engines whose reads are worth
        // aborting do: no error may come of it, so its blocks are not
        // recorded as failed.
        if !req.is_wanted() && st.rng.below(2) == 0 {
            st.report.abandoned += 1;
            drop(st);
            drop(req);
            return;
        }
        let f = st.faults;
        let roll = st.rng.below(1000);
        let covered = |req: &ReadRequest| {
            let b0 = req.first_block();
            (b0..b0 + req.nblocks() as u64).map(move |b| (owner, b))
        };
        if roll < f.eio + f.cancel {
            st.report.faults += 1;
            let eio = roll < f.eio;
            let blocks: Vec<_> = covered(&req).collect();
            if eio { &mut st.eio } else { &mut st.cancelled }.extend(blocks);
            // Outside the lock: completing (or dropping) the request runs
            // the stream's hooks and wakes its task.
            drop(st);
            if eio {
                let rest = req.complete(Err(io::Error::other("simulated EIO")));
                debug_assert!(rest.is_none());
            } else {
                drop(req);
            }
            return;
        }
        if roll < f.eio + f.cancel + f.eagain {
            // The engine retries later, as it would after EAGAIN.
            st.report.faults += 1;
            Self::push(&mut st, owner, file, req);
            return;
        }
        let data = file.bytes();
        // (A read past the end reads nothing: an unexpected end of file.)
        let off = (req.offset() as usize).min(data.len());
        let end = (off + req.len_bytes()).min(data.len());
        let mut n = end.saturating_sub(off);
        if n > 1 && roll < f.eio + f.cancel + f.eagain + f.short {
            st.report.faults += 1;
            n = 1 + st.rng.below(n as u64 - 1) as usize;
        }
        let cached = st.cached_rng.below(1000) < st.cached_per_mille;
        drop(st);
        let mut req = req;
        req.set_served_from_cache(cached);
        let copied = req.copy_from(&data[off..off + n]);
        if let Some(rest) = req.complete(Ok(copied)) {
            let mut st = self.lock();
            Self::push(&mut st, owner, file, rest);
        }
    }

    /// Says which stream the next polls are for.
    fn poll_for(&self, owner: Owner) {
        self.lock().current = owner;
    }
}

impl IoEngine for SimEngine {
    type File = MemFile;

    fn start_read(&self, file: &MemFile, req: ReadRequest) {
        let mut st = self.lock();
        let owner = st.current;
        if st.inline_rng.below(1000) < st.inline_per_mille {
            // Completed (or failed, or dropped) before `start_read`
            // returns, as engines that try a read inline first do.
            st.report.reads += 1;
            st.report.inline += 1;
            self.finish(st, owner, file.clone(), req);
        } else {
            Self::push(&mut st, owner, file.clone(), req);
        }
    }

    fn hints(&self, _file: &MemFile) -> EngineHints {
        self.hints
    }

    /// With the `help` hint (by seed): completes one of `file`'s reads on
    /// the polling thread, as an engine that queues reads for its threads
    /// lets a waiting stream do one.
    fn help(&self, file: &MemFile) -> bool {
        self.complete_where(Some(file))
    }

    /// Takes advice, with the `advice` hint (by seed).
    fn advise(&self, _file: &MemFile, _offset: u64, _len: u64) -> bool {
        self.hints.advice
    }

    fn name(&self) -> &'static str {
        "sim"
    }
}

/// A source of the blocks of `seq`, each with its stream, the stream's
/// resets so far and its position as data, then `None`; asked again after
/// that (which a stream must never do) it names block 0 and counts the
/// call.
struct SimSource {
    tag: Owner,
    seq: Arc<Vec<u64>>,
    next: usize,
    ended: bool,
    asked_after_end: Arc<AtomicUsize>,
}

/// A page's data: the source it came from and its position there.
type Data = (Owner, usize);

impl BlockSource for SimSource {
    type Data = Data;
    fn next_block(&mut self) -> Option<(u64, Data)> {
        if self.ended {
            self.asked_after_end.fetch_add(1, Ordering::Relaxed);
            return Some((0, ((usize::MAX, 0), usize::MAX)));
        }
        match self.seq.get(self.next) {
            Some(&b) => {
                self.next += 1;
                Some((b, (self.tag, self.next - 1)))
            }
            None => {
                self.ended = true;
                None
            }
        }
    }
}

/// Records that a stream's task was woken.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

type SimStream = ReadStream<SimEngine, SimSource>;

enum State {
    Running(Box<SimStream>),
    Closing(Pin<Box<dyn Future<Output = StreamStats>>>),
    Done,
}

type Guard = crate::PageGuard<Data>;

struct Consumer {
    state: State,
    file: usize,
    /// Resets so far.
    gen: u32,
    seq: Arc<Vec<u64>>,
    /// Position of the next item expected from the source.
    pos: usize,
    hold: usize,
    held: VecDeque<Guard>,
    flag: Arc<Flag>,
    waker: Waker,
    asked_after_end: Arc<AtomicUsize>,
    /// Errors in a row for the same block (a pool exhausted by others).
    retries: u32,
    /// Items handed out since the stream was built (all its sources), and
    /// of those the errors, `PoolExhausted` ones apart: what `close`'s
    /// stats must say.
    items: u64,
    errors: u64,
    exhausted: u64,
}

/// A block sequence of one of the shapes the module docs list.
fn sequence(rng: &mut SplitMix, nblocks: u64) -> Vec<u64> {
    let len = 1 + rng.below(3 * nblocks.min(100) + 10) as usize;
    let past = nblocks + 3;
    let mut v = Vec::with_capacity(len);
    match rng.below(6) {
        0 => {
            let start = rng.below(nblocks);
            v.extend((start..past).take(len));
        }
        1 => {
            let start = rng.below(past);
            v.extend((0..=start).rev().take(len));
        }
        2 => {
            // Zigzag: runs up and down.
            let mut b = rng.below(nblocks);
            while v.len() < len {
                let run = 1 + rng.below(8);
                let up = rng.below(2) == 0;
                for _ in 0..run {
                    v.push(b);
                    b = if up { b + 1 } else { b.saturating_sub(1) };
                }
            }
        }
        3 => {
            for _ in 0..len {
                v.push(rng.below(past));
            }
        }
        4 => {
            // Sparse and dense ascending (bitmaps).
            let density = 1 + rng.below(9);
            let mut b = rng.below(4);
            while v.len() < len && b < past {
                if rng.below(10) < density {
                    v.push(b);
                }
                b += 1;
            }
        }
        _ => {
            // Duplicates: each block named once to three times in a row.
            let start = rng.below(nblocks);
            for b in start..past {
                for _ in 0..1 + rng.below(3) {
                    v.push(b);
                }
                if v.len() >= len {
                    break;
                }
            }
        }
    }
    v.truncate(len);
    v
}

/// Steps of a run at most: more is a livelock.
const MAX_STEPS: u64 = 2_000_000;
/// `PoolExhausted` errors in a row for one block at most.
const MAX_EXHAUSTED: u32 = 10_000;

fn fail(seed: u64, what: impl Into<String>) -> SimFailure {
    SimFailure {
        seed,
        what: what.into(),
    }
}

/// Runs the simulation of `seed`; see the module docs.
pub fn run(seed: u64) -> Result<SimReport, SimFailure> {
    let mut rng = SplitMix::new(seed ^ 0x5EED_5EED_5EED_5EED);
    let mut swaps = SplitMix::new(seed ^ 0x3A4E_5EED_0000_0001);
    let mem = MemEngine::new();
    let nfiles = 1 + rng.below(2) as usize;
    let files: Vec<MemFile> = (0..nfiles)
        .map(|_| mem.create_stamped(1 + rng.below(120), BS))
        .collect();
    // A pool of a frame or a few now and then; mostly enough to look ahead.
    let frames = if rng.below(4) == 0 {
        1 + rng.below(4) as usize
    } else {
        [8usize, 16, 64, 256][rng.below(4) as usize]
    };
    let pool = BufferPool::new(frames, BS).map_err(|e| fail(seed, e.to_string()))?;
    let faults = if rng.below(4) == 0 {
        Faults {
            eio: 0,
            eagain: 0,
            cancel: 0,
            short: 0,
        }
    } else {
        Faults {
            eio: rng.below(60),
            eagain: rng.below(60),
            cancel: rng.below(30),
            short: rng.below(200),
        }
    };
    // Draws added since the first seeds were recorded come from their own
    // generator, so that a seed's other draws stay as they were.
    let mut more = SplitMix::new(seed ^ 0x41D5_0000_0002);
    let hints = EngineHints::new()
        .with_retry_blocks(rng.below(4) != 0)
        .with_full_look_ahead(rng.below(3) == 0)
        .with_help(rng.below(3) == 0)
        .with_advice(more.below(2) == 0)
        .with_cached_reads(match more.below(3) {
            0 => CachedReads::One,
            _ => CachedReads::InFlight(1 + more.below(8) as usize),
        });
    let cached_per_mille = [0, 0, 500, 1000][more.below(4) as usize];
    let cached_rng = SplitMix::new(more.next_u64());
    let inline_per_mille = [0, 0, 100, 500][more.below(4) as usize];
    let inline_rng = SplitMix::new(more.next_u64());
    let engine = SimEngine {
        state: Arc::new(Mutex::new(EngineState {
            now: 0,
            seq: 0,
            queue: Vec::new(),
            rng: SplitMix::new(rng.next_u64()),
            faults,
            base_latency: 1 + rng.below(50),
            tail_per_mille: rng.below(50),
            current: (usize::MAX, 0),
            eio: BTreeSet::new(),
            cancelled: BTreeSet::new(),
            report: SimReport::default(),
            cached_per_mille,
            cached_rng,
            inline_per_mille,
            inline_rng,
        })),
        hints,
    };
    let nstreams = 1 + rng.below(6) as usize;
    let mut consumers: Vec<Consumer> = Vec::new();
    for _ in 0..nstreams {
        let file = rng.below(nfiles as u64) as usize;
        let nblocks = (files[file].bytes().len() / BS) as u64;
        let seq = Arc::new(sequence(&mut rng, nblocks));
        let asked_after_end = Arc::new(AtomicUsize::new(0));
        let src = SimSource {
            tag: (consumers.len(), 0),
            seq: Arc::clone(&seq),
            next: 0,
            ended: false,
            asked_after_end: Arc::clone(&asked_after_end),
        };
        let mut b = ReadStream::builder(&pool, engine.clone(), files[file].clone())
            .max_ios(rng.below(9) as usize)
            .io_combine_limit(1 + rng.below(16) as usize)
            .gap_limit(rng.below(4) as usize)
            .fast_path(rng.below(4) != 0)
            .full(rng.below(3) == 0)
            // A budget in items, not time: the real clock would make a
            // seed's polls differ from run to run.
            .yield_budget(YieldBudget::Items(1 + rng.below(64) as usize));
        if rng.below(3) == 0 {
            b = b.ring(Some(RingSize::Frames(1 + rng.below(32) as usize)));
        }
        let stream = b
            .build(src)
            .map_err(|e| fail(seed, format!("build: {e}")))?;
        let flag = Arc::new(Flag(AtomicBool::new(true)));
        consumers.push(Consumer {
            state: State::Running(Box::new(stream)),
            file,
            gen: 0,
            seq,
            pos: 0,
            hold: rng.below(4) as usize,
            held: VecDeque::new(),
            waker: Waker::from(Arc::clone(&flag)),
            flag,
            asked_after_end,
            retries: 0,
            items: 0,
            errors: 0,
            exhausted: 0,
        });
    }
    // Guards kept past their stream's end: (step to release it at, file).
    let mut orphans: Vec<(u64, usize, Guard)> = Vec::new();
    // A guard's bytes are checked again when it is released: nothing may
    // have written its frame while it was pinned.
    let release = |fi: usize, g: Guard| -> Result<(), SimFailure> {
        if stamp::check(files[fi].seed(), g.block(), &g) {
            Ok(())
        } else {
            Err(fail(
                seed,
                format!("block {}'s bytes changed under its guard", g.block()),
            ))
        }
    };
    let mut report = SimReport::default();
    let mut steps = 0u64;
    loop {
        steps += 1;
        if steps > MAX_STEPS {
            return Err(fail(
                seed,
                format!("no end after {MAX_STEPS} steps (livelock)"),
            ));
        }
        for (k, c) in consumers.iter().enumerate() {
            if c.asked_after_end.load(Ordering::Relaxed) != 0 {
                return Err(fail(
                    seed,
                    format!("stream {k}: its source was asked again after it said None"),
                ));
            }
        }
        while let Some(i) = orphans.iter().position(|o| o.0 <= steps) {
            let (_, fi, g) = orphans.swap_remove(i);
            release(fi, g)?;
        }
        let woken: Vec<usize> = (0..consumers.len())
            .filter(|&k| {
                !matches!(consumers[k].state, State::Done)
                    && consumers[k].flag.0.load(Ordering::Acquire)
            })
            .collect();
        let live = consumers.iter().any(|c| !matches!(c.state, State::Done));
        if !live {
            break;
        }
        // Complete a read, or poll a woken stream: which, at random.
        if woken.is_empty() || (!engine.idle() && rng.below(3) == 0) {
            if !engine.complete_one() {
                let stuck: Vec<usize> = (0..consumers.len())
                    .filter(|&k| !matches!(consumers[k].state, State::Done))
                    .collect();
                return Err(fail(
                    seed,
                    format!("hang: streams {stuck:?} wait, no read is pending and none was woken"),
                ));
            }
            continue;
        }
        let k = woken[rng.below(woken.len() as u64) as usize];
        let c = &mut consumers[k];
        c.flag.0.store(false, Ordering::Release);
        engine.poll_for((k, c.gen));
        // Now and then, chaos instead of a poll.
        if let State::Running(_) = c.state {
            match rng.below(400) {
                0 => {
                    // Reset onto a new source.
                    let nblocks = (files[c.file].bytes().len() / BS) as u64;
                    let seq = Arc::new(sequence(&mut rng, nblocks));
                    let asked = Arc::new(AtomicUsize::new(0));
                    c.gen += 1;
                    engine.poll_for((k, c.gen));
                    if let State::Running(s) = &mut c.state {
                        s.reset(SimSource {
                            tag: (k, c.gen),
                            seq: Arc::clone(&seq),
                            next: 0,
                            ended: false,
                            asked_after_end: Arc::clone(&asked),
                        });
                    }
                    c.seq = seq;
                    c.pos = 0;
                    c.asked_after_end = asked;
                    c.flag.0.store(true, Ordering::Release);
                    report.chaos += 1;
                    continue;
                }
                1 => {
                    // Dropped with its reads in flight; its guards outlive it.
                    c.state = State::Done;
                    for g in c.held.drain(..) {
                        orphans.push((steps + rng.below(2000), c.file, g));
                    }
                    report.chaos += 1;
                    continue;
                }
                2 => {
                    let State::Running(s) = std::mem::replace(&mut c.state, State::Done) else {
                        unreachable!()
                    };
                    c.state = State::Closing(Box::pin((*s).close()));
                    c.flag.0.store(true, Ordering::Release);
                    report.chaos += 1;
                    continue;
                }
                _ => {}
            }
        }
        // Now and then a new waker, as an executor that moves the task
        // gives: a wake-up only the old one gets is lost, which the
        // executor sees as a hang. (Its own generator, so that every other
        // draw of a seed stays as it was.)
        if swaps.below(8) == 0 {
            c.flag = Arc::new(Flag(AtomicBool::new(false)));
            c.waker = Waker::from(Arc::clone(&c.flag));
            report.waker_swaps += 1;
        }
        let mut cx = Context::from_waker(&c.waker);
        match &mut c.state {
            State::Done => {}
            State::Closing(f) => {
                if let Poll::Ready(st) = f.as_mut().poll(&mut cx) {
                    // Its stats count what it handed out: pages (errors in
                    // place included) and errors (a `PoolExhausted` is an
                    // error but no page), and hold together.
                    let pages = c.items - c.exhausted;
                    let errors = c.errors + c.exhausted;
                    if st.pages != pages
                        || st.errors != errors
                        || st.fast_path_pages > st.pages
                        || st.gap_blocks > st.blocks_read
                        || st.cached_reads > st.reads
                        || st.max_in_flight > st.reads
                    {
                        return Err(fail(
                            seed,
                            format!(
                                "stream {k} closed: {pages} pages and {errors} errors handed \
                                 out, but its stats say {st:?}"
                            ),
                        ));
                    }
                    c.state = State::Done;
                    for g in c.held.drain(..) {
                        orphans.push((steps + rng.below(2000), c.file, g));
                    }
                }
            }
            State::Running(s) => match Pin::new(&mut **s).poll_next(&mut cx) {
                Poll::Pending => {}
                Poll::Ready(None) => {
                    if c.pos != c.seq.len() {
                        return Err(fail(
                            seed,
                            format!("stream {k} ended after {} of {} blocks", c.pos, c.seq.len()),
                        ));
                    }
                    c.state = State::Done;
                    for g in c.held.drain(..) {
                        release(c.file, g)?;
                    }
                }
                Poll::Ready(Some(item)) => {
                    c.items += 1;
                    let Some(&want) = c.seq.get(c.pos) else {
                        return Err(fail(
                            seed,
                            format!("stream {k} handed out an item past its source's end"),
                        ));
                    };
                    let file = &files[c.file];
                    let nblocks = (file.bytes().len() / BS) as u64;
                    match item {
                        Ok(page) => {
                            if page.block() != want || *page.data() != ((k, c.gen), c.pos) {
                                return Err(fail(
                                    seed,
                                    format!(
                                        "stream {k} (reset {}) item {}: block {} (data {:?}), \
                                         want block {want}",
                                        c.gen,
                                        c.pos,
                                        page.block(),
                                        page.data()
                                    ),
                                ));
                            }
                            if want >= nblocks || !stamp::check(file.seed(), want, &page) {
                                return Err(fail(
                                    seed,
                                    format!("stream {k}: block {want}'s bytes are wrong"),
                                ));
                            }
                            report.pages += 1;
                            c.pos += 1;
                            c.retries = 0;
                            c.held.push_back(page);
                            while c.held.len() > c.hold {
                                let g = c.held.pop_front().expect("a held guard");
                                release(c.file, g)?;
                            }
                        }
                        Err(e) => {
                            let me = ((k, c.gen), want);
                            let explained = match ReadError::from_io(&e) {
                                Some(ReadError::PastEnd { block, .. }) => {
                                    report.past_end += 1;
                                    *block == want && want >= nblocks
                                }
                                Some(ReadError::Io { block, .. }) => {
                                    report.failed += 1;
                                    *block == want && engine.lock().eio.contains(&me)
                                }
                                Some(ReadError::Cancelled { block }) => {
                                    report.failed += 1;
                                    *block == want && engine.lock().cancelled.contains(&me)
                                }
                                Some(ReadError::PoolExhausted { .. }) => {
                                    report.exhausted += 1;
                                    c.exhausted += 1;
                                    // Said in the poll that found no frame
                                    // to claim, and nothing has run since:
                                    // every frame is pinned or being read.
                                    let ps = pool.stats();
                                    if ps.pinned + ps.reading < ps.frames {
                                        return Err(fail(
                                            seed,
                                            format!(
                                                "stream {k} item {}: pool exhausted, but {ps}",
                                                c.pos
                                            ),
                                        ));
                                    }
                                    // The same block comes next: let go of
                                    // what this consumer holds.
                                    for g in c.held.drain(..) {
                                        release(c.file, g)?;
                                    }
                                    c.retries += 1;
                                    if c.retries > MAX_EXHAUSTED {
                                        return Err(fail(
                                            seed,
                                            format!("stream {k}: the pool stays exhausted"),
                                        ));
                                    }
                                    c.flag.0.store(true, Ordering::Release);
                                    continue;
                                }
                                _ => false,
                            };
                            if !explained {
                                return Err(fail(
                                    seed,
                                    format!("stream {k} item {} (block {want}): {e}", c.pos),
                                ));
                            }
                            c.errors += 1;
                            c.pos += 1;
                            c.retries = 0;
                        }
                    }
                    // A stream that handed out an item runs on.
                    c.flag.0.store(true, Ordering::Release);
                }
            },
        }
    }
    // The end: every read finishes (or is dropped), every guard goes.
    while engine.complete_one() {}
    for (_, fi, g) in orphans {
        release(fi, g)?;
    }
    drop(consumers);
    let ps = pool.stats();
    if ps.pinned != 0 || ps.reading != 0 {
        return Err(fail(seed, format!("left behind: {ps}")));
    }
    // Every frame is reusable, and every page the pool kept is right: a
    // scan of each file, and of a new one larger than the pool.
    let fresh = mem.create_stamped(2 * frames as u64 + 1, BS);
    for file in files.iter().chain([&fresh]) {
        let nblocks = (file.bytes().len() / BS) as u64;
        let mut all = ReadStream::builder(&pool, MemEngine::new(), file.clone())
            .max_ios(0)
            .build(crate::source::forward(0..nblocks))
            .map_err(|e| fail(seed, format!("final scan: {e}")))?;
        // Polled by hand: the in-memory engine completes reads inline, so
        // a `Pending` nothing woke is a hang.
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&waker);
        let mut checked = 0;
        for polls in 0u64.. {
            if polls > 1_000_000 {
                return Err(fail(seed, "final scan: no end after 1,000,000 polls"));
            }
            match Pin::new(&mut all).poll_next(&mut cx) {
                Poll::Ready(None) => break,
                Poll::Ready(Some(Err(e))) => {
                    return Err(fail(seed, format!("final scan, block {checked}: {e}")))
                }
                Poll::Ready(Some(Ok(page))) => {
                    if page.block() != checked || !stamp::check(file.seed(), checked, &page) {
                        return Err(fail(
                            seed,
                            format!("final scan: block {checked} is wrong in the pool"),
                        ));
                    }
                    checked += 1;
                }
                Poll::Pending => {
                    if !flag.0.swap(false, Ordering::AcqRel) {
                        return Err(fail(
                            seed,
                            format!("final scan: hang at block {checked} (nothing woke it)"),
                        ));
                    }
                }
            }
        }
        if checked != nblocks {
            return Err(fail(
                seed,
                format!("final scan read {checked} of {nblocks}"),
            ));
        }
    }
    let st = engine.lock();
    report.reads = st.report.reads;
    report.faults = st.report.faults;
    report.abandoned = st.report.abandoned;
    report.inline = st.report.inline;
    report.virtual_time = st.now;
    Ok(report)
}
