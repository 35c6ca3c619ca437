//! Property tests of the planner against a naive model.
//!
//! Oracle: the naive reader — read each block the source names, in order,
//! one at a time, no look-ahead: the output is the source sequence itself,
//! each block once, with blocks past the end of the file as errors in place.
//! The planner runs against `Sim`, a simulated pool and engine that records
//! every pin and read, completes reads in a random order, and checks each
//! read it is asked to start.
//!
//! Properties: order and exactly-once (with per-block data), `max_ios` and
//! `io_combine_limit` never exceeded, look-ahead pins never above the pin
//! budget, blocks taken from the source ahead of the consumer (errors
//! included) never above the pin budget plus one, the source never asked
//! again once it has returned `None` (the model's source is not fused),
//! every pin released (after the end, after `reset`), every read a
//! run of consecutive blocks that were consecutive in the source (ascending,
//! or descending when flagged so), and — in the steady state (cold, budget
//! not binding, full-sized from the start) — a maximal run of `n` blocks,
//! forward or backward, read in ⌈n / io_combine_limit⌉ reads. The distance
//! rule: without full look-ahead, the distance rises only while the consumer
//! waits (within a distance of pages of its last wait), and by doubling.
//!
//! Not modelled here: short reads (they live in `ReadRequest` and are
//! covered by `tests/prop_stream_oracle.rs` through the real stream), real
//! concurrency (the conformance suite with the latency wrapper, loom).
//!
//! Mutants: build with `RUSTFLAGS='--cfg pagestream_mutant="swap"'` (or
//! `"drop_combine"`, `"leak_pin"`, `"pg18_growth"`) to plant a bug in the
//! planner; these tests must then fail.

use super::*;
use crate::pool::{Lookup, Status};
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq)]
enum St {
    Empty,
    Io,
    Valid,
}

struct SimRead {
    slot: u32,
    frames: Vec<u32>,
}

struct Sim {
    source: std::vec::IntoIter<(u64, usize)>,
    /// The source has returned `None`. It is not fused: asked again, it
    /// names a block (a violation: the end of a source is final).
    ended: bool,
    /// Blocks the source has named.
    pulled: usize,
    nblocks: u64,
    /// frame → (block, status, pins)
    frames: Vec<(u64, St, usize)>,
    map: HashMap<u64, u32>,
    max_frames: usize,
    avail: usize,
    in_flight: Vec<SimRead>,
    max_in_flight: usize,
    combine: usize,
    /// Every read started: (first block, nblocks, descending).
    reads: Vec<(u64, usize, bool)>,
    /// Positions in the source of each block occurrence not yet started,
    /// to check reads follow source adjacency.
    source_blocks: Vec<u64>,
    violations: Vec<String>,
    /// Completions say the read was served from the OS page cache.
    cached_reads: bool,
    /// LCG state for which cached completions are not.
    flip: u64,
    /// Advice not tied to a read (read-ahead windows): (first block, blocks,
    /// reads started before it).
    advised: Vec<(u64, u64, usize)>,
    /// The longest gap a read may read through.
    gap_limit: usize,
    /// Blocks read through gaps.
    gap_blocks: usize,
}

impl Sim {
    fn new(seq: &[u64], nblocks: u64, cached: &[u64], max_frames: usize, combine: usize) -> Self {
        let mut s = Sim {
            source: seq
                .iter()
                .copied()
                .enumerate()
                .map(|(i, b)| (b, i))
                .collect::<Vec<_>>()
                .into_iter(),
            ended: false,
            pulled: 0,
            nblocks,
            frames: Vec::new(),
            map: HashMap::new(),
            max_frames,
            avail: usize::MAX / 4,
            in_flight: Vec::new(),
            max_in_flight: 0,
            combine,
            reads: Vec::new(),
            source_blocks: seq.to_vec(),
            violations: Vec::new(),
            cached_reads: false,
            flip: 1,
            advised: Vec::new(),
            gap_limit: 0,
            gap_blocks: 0,
        };
        for &b in cached {
            if b < nblocks && !s.map.contains_key(&b) {
                s.map.insert(b, s.frames.len() as u32);
                s.frames.push((b, St::Valid, 0));
            }
        }
        s
    }

    fn pins(&self) -> usize {
        self.frames.iter().map(|f| f.2).sum()
    }

    fn complete(&mut self, i: usize, ok: bool) -> (u32, Result<bool, io::Error>) {
        let r = self.in_flight.remove(i);
        for &f in &r.frames {
            self.frames[f as usize].1 = if ok { St::Valid } else { St::Empty };
        }
        (
            r.slot,
            if ok {
                Ok({
                    // Mostly served from the page cache, now and then not
                    // (a partial RWF_NOWAIT read finished on a thread).
                    self.flip = self
                        .flip
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    self.cached_reads && (self.flip >> 60) != 0
                })
            } else {
                Err(io::Error::other("sim EIO"))
            },
        )
    }
}

impl Env<usize> for Sim {
    fn next_block(&mut self) -> Option<(u64, usize)> {
        if self.ended {
            self.violations
                .push("the source was asked again after it returned None".into());
            return Some((0, usize::MAX));
        }
        let next = self.source.next();
        match next {
            Some(_) => self.pulled += 1,
            None => self.ended = true,
        }
        next
    }
    fn check_block(&self, block: u64) -> Result<(), ReadError> {
        if block < self.nblocks {
            Ok(())
        } else {
            Err(ReadError::PastEnd {
                block,
                file_len: self.nblocks * 8192,
                file_blocks: self.nblocks,
                block_size: 8192,
            })
        }
    }
    fn lookup(&mut self, block: u64) -> Result<Lookup, ()> {
        if let Some(&f) = self.map.get(&block) {
            self.frames[f as usize].2 += 1;
            return Ok(self.claim_io(f));
        }
        // Reuse an unpinned, non-IO frame, or grow up to max_frames.
        let f = if self.frames.len() < self.max_frames {
            self.frames.push((block, St::Empty, 0));
            (self.frames.len() - 1) as u32
        } else if let Some(f) = self
            .frames
            .iter()
            .position(|fr| fr.2 == 0 && fr.1 != St::Io)
        {
            let old = self.frames[f].0;
            self.map.remove(&old);
            f as u32
        } else {
            return Err(());
        };
        self.frames[f as usize] = (block, St::Io, 1);
        self.map.insert(block, f);
        Ok(Lookup::Read(f))
    }
    fn resident(&mut self, block: u64) -> bool {
        self.map
            .get(&block)
            .is_some_and(|&f| self.frames[f as usize].1 == St::Valid)
    }
    fn frame_status(&self, frame: u32) -> Status {
        match self.frames[frame as usize].1 {
            St::Empty => Status::Empty,
            St::Io => Status::Io,
            St::Valid => Status::Valid,
        }
    }
    fn claim_io(&mut self, f: u32) -> Lookup {
        let fr = &mut self.frames[f as usize];
        match fr.1 {
            St::Valid => Lookup::Hit(f),
            St::Io => Lookup::Busy(f),
            St::Empty => {
                fr.1 = St::Io;
                Lookup::Read(f)
            }
        }
    }
    fn unpin(&mut self, frame: u32) {
        let fr = &mut self.frames[frame as usize];
        assert!(fr.2 > 0, "unpin of unpinned frame");
        fr.2 -= 1;
    }
    fn start_read(
        &mut self,
        slot: u32,
        first: u64,
        frames: Vec<u32>,
        gaps: &[u32],
        descending: bool,
        _advise: bool,
    ) {
        let n = frames.len();
        if n > self.combine {
            self.violations
                .push(format!("read of {n} blocks > combine {}", self.combine));
        }
        for (i, &f) in frames.iter().enumerate() {
            let (b, st, _) = self.frames[f as usize];
            if b != first + i as u64 || st != St::Io {
                self.violations.push(format!(
                    "read frame {i} holds block {b} ({st:?}), want {} in IO",
                    first + i as u64
                ));
            }
        }
        // Gaps: inside the read (its first and last blocks are wanted), in
        // an ascending one, each at most `gap_limit` blocks, pinned by the
        // claim (an entry further on may pin the block too, waiting to
        // read it again); the claim's pin goes as the read starts.
        let is_gap: Vec<bool> = frames.iter().map(|f| gaps.contains(f)).collect();
        if !gaps.is_empty() {
            let longest = is_gap.split(|&g| !g).map(<[bool]>::len).max().unwrap_or(0);
            if descending || is_gap[0] || is_gap[n - 1] || longest > self.gap_limit {
                self.violations.push(format!(
                    "read from {first} with gaps {is_gap:?} (descending {descending}, limit {})",
                    self.gap_limit
                ));
            }
        }
        for &g in gaps {
            if !frames.contains(&g) || self.frames[g as usize].2 == 0 {
                self.violations
                    .push(format!("gap frame {g} not the read's, or not pinned"));
            }
            self.unpin(g);
        }
        // The wanted blocks must be consecutive in the source, in the
        // flagged direction.
        let mut run: Vec<u64> = (first..first + n as u64)
            .zip(&is_gap)
            .filter(|(_, &g)| !g)
            .map(|(b, _)| b)
            .collect();
        if descending {
            run.reverse();
        }
        let k = run.len();
        if k > 1 && !self.source_blocks.windows(k).any(|w| w == run.as_slice()) {
            self.violations
                .push(format!("read {run:?} was never consecutive in the source"));
        }
        self.gap_blocks += gaps.len();
        self.reads.push((first, n, descending));
        self.in_flight.push(SimRead { slot, frames });
        self.max_in_flight = self.max_in_flight.max(self.in_flight.len());
    }
    fn abandon(&mut self, frame: u32) {
        let fr = &mut self.frames[frame as usize];
        if fr.1 != St::Io || fr.2 == 0 {
            self.violations
                .push(format!("abandoned frame {frame} not claimed for a read"));
        }
        fr.1 = St::Empty;
        self.unpin(frame);
    }
    fn advise(&mut self, first: u64, n: u64) -> bool {
        if n == 0 || first + n > self.nblocks {
            self.violations.push(format!(
                "advice for blocks {first}..{} of {}",
                first + n,
                self.nblocks
            ));
        }
        self.advised.push((first, n, self.reads.len()));
        true
    }
    fn frames_available(&mut self, _reader: bool) -> usize {
        self.avail
    }
}

fn cfg(max_ios: usize, combine: usize, backward: bool, full: bool) -> PlanConfig {
    PlanConfig {
        cached_depth: 1,
        max_ios: max_ios.max(1),
        combine,
        budget: (max_ios + 1) * combine,
        advice: AdvicePolicy::Auto,
        advice_possible: false,
        kernel_readahead: true,
        backward_combining: backward,
        fast_path: true,
        full,
        full_look_ahead: false,
        segment_blocks: 0,
        retry_blocks: true,
        backward_readahead: 0,
        gap_limit: 0,
    }
}

/// What one run produced.
struct Outcome {
    out: Vec<(u64, usize, bool)>,
    sim: Sim,
    max_planner_pins: usize,
    /// The largest look-ahead distance seen.
    max_distance: usize,
    planner_pins_end: usize,
}

/// Drives the planner like the stream does, the consumer holding up to
/// `hold` guards, completing reads in the order `rng` picks.
fn drive(
    seq: &[u64],
    nblocks: u64,
    cached: &[u64],
    c: PlanConfig,
    hold: usize,
    seed: u64,
    fail_every: u64,
) -> Outcome {
    drive_spare(
        seq,
        nblocks,
        cached,
        c,
        hold,
        seed,
        fail_every,
        usize::MAX / 4,
    )
}

/// [`drive`], with the pool sparing the stream `avail` frames for
/// look-ahead.
#[allow(clippy::too_many_arguments)]
fn drive_spare(
    seq: &[u64],
    nblocks: u64,
    cached: &[u64],
    c: PlanConfig,
    hold: usize,
    seed: u64,
    fail_every: u64,
    avail: usize,
) -> Outcome {
    let budget = c.budget;
    // Full look-ahead raises the distance as reads start; else it rises
    // only as the consumer takes the first page of a read it waited for or
    // behind (those of the simulated engine are never served from the OS
    // page cache): pages queued at the last wait, not yet taken.
    let rises_on_wait_only = !c.full_look_ahead;
    let mut behind = 0usize;
    let mut sim = Sim::new(seq, nblocks, cached, 10_000, c.combine);
    sim.avail = avail;
    sim.gap_limit = c.gap_limit;
    let mut p: Planner<usize> = Planner::new(c);
    let mut rng = crate::testing::SplitMix::new(seed);
    let mut held: std::collections::VecDeque<u32> = Default::default();
    let mut out = Vec::new();
    let mut max_planner_pins = 0;
    let mut max_distance = 0;
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 1_000_000, "planner does not terminate");
        // Sometimes finish a random read early.
        if !sim.in_flight.is_empty() && rng.below(3) == 0 {
            let i = rng.below(sim.in_flight.len() as u64) as usize;
            let ok = fail_every == 0 || rng.below(fail_every) != 0;
            let (slot, r) = sim.complete(i, ok);
            let d0 = p.distance();
            p.read_done(slot, r);
            p.look_ahead(&mut sim);
            assert!(
                !rises_on_wait_only || p.distance() <= d0,
                "the distance rose from {d0} to {} as a read finished",
                p.distance()
            );
        }
        let head = if p.in_fast_path() {
            Head::Ready
        } else {
            p.prepare_head(&mut sim)
        };
        match head {
            Head::End => break,
            Head::Ready => {
                let d0 = p.distance();
                let fast = p.in_fast_path();
                let e = if fast {
                    p.fast_pop(&mut sim)
                } else {
                    p.pop(&mut sim)
                };
                // Look further ahead only over reads the consumer waited
                // for, and by doubling.
                let d1 = p.distance();
                if rises_on_wait_only && d1 > d0 {
                    assert!(
                        behind > 0,
                        "the distance rose from {d0} to {d1} without a wait"
                    );
                    assert!(d1 <= 2 * d0, "the distance rose from {d0} to {d1}");
                }
                // The planner counts the pages `pop` hands out, not the
                // fast path's hits (at distance 1, with nothing in flight).
                if !fast {
                    behind = behind.saturating_sub(1);
                }
                let ok = !matches!(e.slot, Slot::Failed(_));
                if e.frame != NO_FRAME {
                    if ok {
                        let (b, st, _) = sim.frames[e.frame as usize];
                        assert_eq!(
                            (b, st),
                            (e.block, St::Valid),
                            "handed out a frame that is not the valid block"
                        );
                    }
                    held.push_back(e.frame);
                    if held.len() > hold {
                        let f = held.pop_front().unwrap();
                        sim.unpin(f);
                    }
                }
                out.push((e.block, e.data, ok));
            }
            Head::WaitRead | Head::WaitFrame(_) => {
                assert!(
                    !sim.in_flight.is_empty(),
                    "waits with nothing in flight: hang"
                );
                p.note_wait();
                behind = behind.max(p.queued());
                let i = rng.below(sim.in_flight.len() as u64) as usize;
                let ok = fail_every == 0 || rng.below(fail_every) != 0;
                let (slot, r) = sim.complete(i, ok);
                p.read_done(slot, r);
                p.look_ahead(&mut sim);
            }
            Head::Exhausted => {
                assert!(!held.is_empty(), "exhausted with nothing held");
                while let Some(f) = held.pop_front() {
                    sim.unpin(f);
                }
            }
        }
        // Look-ahead bounds what is taken from the source, errors included:
        // the queue never outgrows the distance (at most the pin budget),
        // plus one block taken but not yet queued.
        let ahead = sim.pulled - out.len();
        assert!(
            ahead <= budget.max(1) + 1,
            "{ahead} blocks taken from the source ahead of the consumer, budget {budget}"
        );
        // The planner's pins, and the holes of its reads in flight (in IO,
        // unpinned): the frames it holds.
        let holes = sim
            .frames
            .iter()
            .filter(|f| f.1 == St::Io && f.2 == 0)
            .count();
        let planner_pins = sim.pins() - held.len() + holes;
        max_planner_pins = max_planner_pins.max(planner_pins);
        max_distance = max_distance.max(p.distance());
        assert!(
            planner_pins <= budget.max(1),
            "look-ahead holds {planner_pins} frames, above budget {budget}"
        );
    }
    while let Some(f) = held.pop_front() {
        sim.unpin(f);
    }
    let planner_pins_end = sim.pins();
    Outcome {
        out,
        sim,
        max_planner_pins,
        max_distance,
        planner_pins_end,
    }
}

fn oracle(seq: &[u64], nblocks: u64) -> Vec<(u64, usize, bool)> {
    seq.iter()
        .enumerate()
        .map(|(i, &b)| (b, i, b < nblocks))
        .collect()
}

/// Block sequences mixing ascending and descending runs, ascending runs
/// with holes of one or two blocks (a dense bitmap), jumps, repeats and the
/// odd block past the end.
fn sequences() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec((0u64..70, 1usize..20, 0u8..6), 1..12).prop_map(|runs| {
        let mut v = Vec::new();
        for (start, len, kind) in runs {
            for i in 0..len as u64 {
                v.push(match kind {
                    0 => start + i,
                    1 => start.saturating_sub(i),
                    2 => start,
                    3 => start + i + i / 2,
                    4 => start + 3 * i,
                    _ => (start * 7 + i * 13) % 70,
                });
            }
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn matches_naive_reader(
        seq in sequences(),
        cached in prop::collection::vec(0u64..70, 0..20),
        max_ios in 0usize..6,
        combine in 1usize..9,
        backward in any::<bool>(),
        full in any::<bool>(),
        full_look_ahead in any::<bool>(),
        hold in 0usize..4,
        seed in any::<u64>(),
        window in prop::sample::select(vec![0u64, 4, 9, 32]),
        gap_limit in 0usize..4,
    ) {
        let nblocks = 64; // some blocks of `sequences` are past the end
        // With a window, advice is taken (a buffered file): read-ahead
        // windows below descending runs, which the simulation checks lie
        // inside the file.
        let c = PlanConfig {
            full_look_ahead,
            advice_possible: window > 0,
            backward_readahead: window,
            gap_limit,
            ..cfg(max_ios, combine, backward, full)
        };
        let o = drive(&seq, nblocks, &cached, c, hold, seed, 0);
        prop_assert_eq!(&o.out, &oracle(&seq, nblocks));
        prop_assert!(o.sim.violations.is_empty(), "{:?}", o.sim.violations);
        prop_assert!(o.sim.max_in_flight <= max_ios.max(1));
        prop_assert!(o.max_planner_pins <= (max_ios + 1) * combine);
        prop_assert_eq!(o.planner_pins_end, 0, "pins left behind");
        if !backward {
            prop_assert!(o.sim.reads.iter().all(|r| !r.2), "backward read with combining off");
        }
    }

    #[test]
    fn look_ahead_stays_within_the_frames_the_pool_spares(
        seq in sequences(),
        cached in prop::collection::vec(0u64..70, 0..20),
        max_ios in 0usize..6,
        combine in 1usize..9,
        full_look_ahead in any::<bool>(),
        retry_blocks in any::<bool>(),
        fail_every in prop::sample::select(vec![0u64, 3]),
        avail in 1usize..24,
        seed in any::<u64>(),
        gap_limit in 0usize..4,
    ) {
        // Frames bind: the pool spares fewer than the pin budget. However
        // the distance is raised (full look-ahead) and whatever fails, the
        // stream pins no more than it was spared, and order and
        // exactly-once hold.
        let nblocks = 64;
        let c = PlanConfig {
            full_look_ahead,
            retry_blocks,
            gap_limit,
            ..cfg(max_ios, combine, true, false)
        };
        let budget = c.budget;
        let o = drive_spare(&seq, nblocks, &cached, c, 1, seed, fail_every, avail);
        prop_assert_eq!(o.out.len(), seq.len());
        for (i, (b, d, _)) in o.out.iter().enumerate() {
            prop_assert_eq!((*b, *d), (seq[i], i));
        }
        if fail_every == 0 {
            prop_assert_eq!(&o.out, &oracle(&seq, nblocks));
        }
        prop_assert!(o.sim.violations.is_empty(), "{:?}", o.sim.violations);
        prop_assert!(o.sim.max_in_flight <= max_ios.max(1));
        prop_assert!(
            o.max_planner_pins <= budget.min(avail),
            "{} pins with {} spared and a budget of {}", o.max_planner_pins, avail, budget
        );
        prop_assert!(
            o.max_distance <= budget.min(avail).max(1),
            "distance {} with {} spared and a budget of {}", o.max_distance, avail, budget
        );
        prop_assert_eq!(o.planner_pins_end, 0, "pins left behind");
    }

    #[test]
    fn failed_reads_are_retried_alone(
        seq in sequences(),
        max_ios in 1usize..5,
        combine in 1usize..9,
        seed in any::<u64>(),
        gap_limit in 0usize..4,
    ) {
        // One in three reads fails: a failed combined read is retried block
        // by block (a read through a gap too); a failed single-block read
        // is that block's error. Order and exactly-once still hold; every
        // page handed out is valid.
        let nblocks = 64;
        let c = PlanConfig { gap_limit, ..cfg(max_ios, combine, true, false) };
        let o = drive(&seq, nblocks, &[], c, 1, seed, 3);
        prop_assert_eq!(o.out.len(), seq.len());
        for (i, (b, d, _)) in o.out.iter().enumerate() {
            prop_assert_eq!((*b, *d), (seq[i], i));
        }
        prop_assert_eq!(o.planner_pins_end, 0);
        prop_assert!(o.sim.violations.is_empty(), "{:?}", o.sim.violations);
    }

    #[test]
    fn steady_state_runs_take_ceil_n_over_combine_reads(
        n in 1u64..200,
        combine in 1usize..33,
        backward in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let seq: Vec<u64> = if backward { (0..n).rev().collect() } else { (0..n).collect() };
        let o = drive(&seq, n, &[], cfg(16, combine, true, true), 0, seed, 0);
        prop_assert_eq!(o.out, oracle(&seq, n));
        let want = n.div_ceil(combine as u64) as usize;
        prop_assert_eq!(o.sim.reads.len(), want, "reads: {:?}", o.sim.reads);
        if backward && n > 1 {
            prop_assert!(o.sim.reads.iter().filter(|r| r.1 > 1).all(|r| r.2));
        }
    }

    #[test]
    fn reset_releases_everything(
        seq in sequences(),
        cut in 0usize..40,
        max_ios in 0usize..6,
        combine in 1usize..9,
        seed in any::<u64>(),
    ) {
        let nblocks = 64;
        let mut sim = Sim::new(&seq, nblocks, &[], 10_000, combine);
        let mut p: Planner<usize> = Planner::new(cfg(max_ios, combine, true, false));
        let mut rng = crate::testing::SplitMix::new(seed);
        let mut taken = 0;
        while taken < cut {
            match p.prepare_head(&mut sim) {
                Head::Ready => {
                    let e = p.pop(&mut sim);
                    if e.frame != NO_FRAME { sim.unpin(e.frame); }
                    taken += 1;
                }
                Head::WaitRead | Head::WaitFrame(_) => {
                    let i = rng.below(sim.in_flight.len() as u64) as usize;
                    let (slot, r) = sim.complete(i, true);
                    p.read_done(slot, r);
                }
                Head::End | Head::Exhausted => break,
            }
        }
        p.reset(&mut sim);
        prop_assert_eq!(p.pinned(), 0);
        prop_assert_eq!(sim.pins(), 0, "reset left pins");
        // Orphaned reads still report; their slots come back.
        while !sim.in_flight.is_empty() {
            let (slot, r) = sim.complete(0, true);
            p.read_done(slot, r);
        }
        prop_assert_eq!(p.ios_in_progress(), 0);
    }
}

/// One turn of a consumer that waits for the oldest read: hands out the
/// head page (and drops it) if it is ready, else completes the oldest read
/// in flight. `Some(true)`: a page was handed out; `None`: the end.
fn step(p: &mut Planner<usize>, sim: &mut Sim) -> Option<bool> {
    match p.prepare_head(sim) {
        Head::Ready => {
            let e = p.pop(sim);
            sim.unpin(e.frame);
            Some(true)
        }
        Head::WaitRead | Head::WaitFrame(_) => {
            p.note_wait();
            let (slot, r) = sim.complete(0, true);
            p.read_done(slot, r);
            Some(false)
        }
        Head::End => None,
        Head::Exhausted => unreachable!("the simulated pool never runs out"),
    }
}

/// A buffered scan whose reads are mostly served from the page cache (kernel
/// read-ahead ahead of it; one in sixteen not), completing at random moments,
/// keeps issuing full-sized reads: the pending read grows to the combine
/// limit before it starts. (A version that started the pending read as soon
/// as it reached the head made reads of ~9 blocks on a cold buffered scan.)
#[test]
fn warm_scan_reads_are_full_sized() {
    for combine in [4usize, 8, 16, 32] {
        let n = 1000u64;
        let seq: Vec<u64> = (0..n).collect();
        let mut sim = Sim::new(&seq, n, &[], 10_000, combine);
        sim.cached_reads = true;
        let mut p: Planner<usize> = Planner::new(cfg(16, combine, true, false));
        let mut out = 0;
        let mut rng = crate::testing::SplitMix::new(combine as u64);
        loop {
            // An inline engine: every read started has completed by the next
            // poll, which hands completions over and looks ahead (as
            // `ReadStream::poll_next` does).
            let mut drained = false;
            while !sim.in_flight.is_empty() && rng.below(4) != 0 {
                let (slot, r) = sim.complete(0, true);
                p.read_done(slot, r);
                drained = true;
            }
            if drained {
                p.look_ahead(&mut sim);
            }
            match step(&mut p, &mut sim) {
                Some(page) => out += u64::from(page),
                None => break,
            }
        }
        assert_eq!(out, n);
        // The ramp (distance 1, 2, 4, …) makes a few short reads first.
        let short = sim.reads.iter().filter(|r| r.1 < combine).count();
        assert!(
            short <= 6,
            "combine {combine}: {short} short reads of {}",
            sim.reads.len()
        );
    }
}

#[test]
fn hot_scan_takes_the_fast_path() {
    let seq: Vec<u64> = (0..100).collect();
    let o = drive(&seq, 100, &seq, cfg(16, 16, true, false), 0, 1, 0);
    assert_eq!(o.out, oracle(&seq, 100));
    assert!(o.sim.reads.is_empty());
}

#[test]
fn distance_ramps_by_doubling() {
    // Cold forward scan, reads finishing only when waited for: the
    // distance doubles per read consumed, up to the pin budget.
    let seq: Vec<u64> = (0..2000).collect();
    let mut sim = Sim::new(&seq, 2000, &[], 10_000, 16);
    let mut p: Planner<usize> = Planner::new(cfg(8, 16, true, false));
    let mut seen = Vec::new();
    while let Some(page) = step(&mut p, &mut sim) {
        if page && seen.last() != Some(&p.distance()) {
            seen.push(p.distance());
        }
    }
    assert_eq!(&seen[..5], &[2, 4, 8, 16, 32], "ramp: {seen:?}");
    assert_eq!(p.stats.max_distance, 9 * 16, "capped at the pin budget");
}

/// Reads that have finished by the time the consumer gets to them (a device
/// that keeps up): the distance stays at one block, and the reads still
/// grow to full size (the combine distance doubles per read), so the stream
/// pins at most one read's frames (a doubling per read, whether waited for
/// or not, would take the distance to the pin budget).
#[test]
fn a_consumer_that_never_waits_keeps_the_distance_short() {
    let combine = 16;
    let n = 2000u64;
    let seq: Vec<u64> = (0..n).collect();
    let mut sim = Sim::new(&seq, n, &[], 10_000, combine);
    let mut p: Planner<usize> = Planner::new(cfg(8, combine, true, false));
    let mut out = 0;
    let mut most_pins = 0;
    loop {
        // Every read started has finished by the next poll.
        while !sim.in_flight.is_empty() {
            let (slot, r) = sim.complete(0, true);
            p.read_done(slot, r);
        }
        most_pins = most_pins.max(sim.pins());
        match step(&mut p, &mut sim) {
            Some(page) => out += u64::from(page),
            None => break,
        }
    }
    assert_eq!(out, n);
    // The consumer waits for the first read only.
    assert_eq!(p.stats.max_distance, 2, "the distance rose without a wait");
    assert!(most_pins <= combine, "{most_pins} frames pinned");
    // The combine distance ramps 1, 2, 4, 8, then every read but the last
    // (the end of the file) is full-sized.
    let sizes: Vec<usize> = sim.reads.iter().map(|r| r.1).collect();
    assert_eq!(sizes[..4], [1, 2, 4, 8]);
    let k = sizes.len();
    assert!(sizes[4..k - 1].iter().all(|&s| s == combine), "{sizes:?}");
}

/// A miss, a hit, a miss, …, each read waited for: hits must not undo the
/// look-ahead at once (PostgreSQL 19's decay hold-off). A decrement per
/// hit against a doubling per read would hold the distance at 2 or 3, one
/// read in flight at a time.
#[test]
fn hits_between_misses_do_not_undo_the_look_ahead() {
    let combine = 16;
    let max_ios = 8;
    let n = 2000u64;
    let seq: Vec<u64> = (0..n).collect();
    let even: Vec<u64> = (0..n).step_by(2).collect();
    let mut sim = Sim::new(&seq, n, &even, 10_000, combine);
    let c = cfg(max_ios, combine, true, false);
    let budget = c.budget;
    let mut p: Planner<usize> = Planner::new(c);
    let mut out = 0;
    while let Some(page) = step(&mut p, &mut sim) {
        out += u64::from(page);
    }
    assert_eq!(out, n);
    assert_eq!(p.stats.max_distance as usize, budget);
    assert_eq!(sim.max_in_flight, max_ios);
}

/// A scan that turns hot after a cold stretch: the distance holds for a
/// budget of hits after the last read, then decays to one block.
#[test]
fn a_scan_that_turns_hot_decays_after_the_hold_off() {
    let combine = 16;
    let n = 3000u64;
    let seq: Vec<u64> = (0..n).collect();
    let hot: Vec<u64> = (500..n).collect();
    let mut sim = Sim::new(&seq, n, &hot, 10_000, combine);
    let c = cfg(8, combine, true, false);
    let budget = c.budget;
    let mut p: Planner<usize> = Planner::new(c);
    let mut distances = Vec::new();
    while let Some(page) = step(&mut p, &mut sim) {
        if page {
            distances.push(p.distance());
        }
    }
    assert_eq!(distances.len(), n as usize);
    assert_eq!(
        distances[499], budget,
        "the cold stretch ramps to the budget"
    );
    // The look-ahead found the hits a distance ahead of the consumer.
    let held = distances[500..]
        .iter()
        .take_while(|&&d| d == budget)
        .count();
    assert!(held >= budget / 2, "the distance held for {held} pages");
    // Then one page a hit: a budget of pages to decay, and the last
    // thousand at distance 1, where the fast path takes over.
    assert!(distances[n as usize - 1000..].iter().all(|&d| d == 1));
}

/// With an engine that asks for `CachedReads::InFlight` reads, a warm
/// scan's distance settles at that many full-sized reads (and at one read
/// with the default depth of 1), and its reads stay full-sized.
#[test]
fn warm_scan_keeps_cached_depth_reads_in_flight() {
    let combine = 16;
    for depth in [1usize, 3, 6] {
        let n = 2000u64;
        let seq: Vec<u64> = (0..n).collect();
        let mut sim = Sim::new(&seq, n, &[], 10_000, combine);
        let mut c = cfg(16, combine, true, false);
        c.cached_depth = depth;
        let mut p: Planner<usize> = Planner::new(c);
        let mut out = 0u64;
        let mut distances = Vec::new();
        loop {
            match p.prepare_head(&mut sim) {
                Head::Ready => {
                    let e = p.pop(&mut sim);
                    sim.unpin(e.frame);
                    distances.push(p.distance());
                    out += 1;
                }
                // An engine whose reads complete only when the consumer
                // would wait (the helper never gets to them): the oldest.
                Head::WaitRead | Head::WaitFrame(_) => {
                    let (slot, _) = sim.complete(0, true);
                    p.read_done(slot, Ok(true));
                    p.look_ahead(&mut sim);
                }
                Head::End => break,
                Head::Exhausted => unreachable!(),
            }
        }
        assert_eq!(out, n);
        let want = depth * combine;
        assert!(distances.iter().all(|&d| d <= want), "depth {depth}");
        // After the ramp the distance stays at `depth` reads.
        let settled = distances[distances.len() / 2..].iter().all(|&d| d == want);
        assert!(settled, "depth {depth}: distance does not settle at {want}");
        assert!(
            sim.max_in_flight >= depth.saturating_sub(1).max(1) && sim.max_in_flight <= depth,
            "depth {depth}: {} reads in flight at most",
            sim.max_in_flight
        );
        let short = sim.reads.iter().filter(|r| r.1 < combine).count();
        assert!(short <= 6, "depth {depth}: {short} short reads");
    }
}

/// An engine may ask for any `CachedReads::InFlight`: a huge one (which used to
/// overflow the distance target) is clamped, and a warm scan reads every
/// block, with the distance held by the pin budget.
#[test]
fn huge_cached_depth_is_clamped_and_scans() {
    let combine = 16;
    for depth in [usize::MAX, 1 << 60, crate::MAX_IOS + 1] {
        let n = 2000u64;
        let seq: Vec<u64> = (0..n).collect();
        let mut sim = Sim::new(&seq, n, &[], 10_000, combine);
        let mut c = cfg(16, combine, true, false);
        let budget = c.budget;
        c.cached_depth = depth;
        let mut p: Planner<usize> = Planner::new(c);
        let mut out = 0u64;
        loop {
            match p.prepare_head(&mut sim) {
                Head::Ready => {
                    let e = p.pop(&mut sim);
                    assert_eq!(e.block, out, "depth {depth}");
                    sim.unpin(e.frame);
                    assert!(p.distance() >= 1 && p.distance() <= budget, "depth {depth}");
                    out += 1;
                }
                Head::WaitRead | Head::WaitFrame(_) => {
                    let (slot, _) = sim.complete(0, true);
                    p.read_done(slot, Ok(true));
                    p.look_ahead(&mut sim);
                }
                Head::End => break,
                Head::Exhausted => unreachable!(),
            }
        }
        assert_eq!(out, n, "depth {depth}");
    }
}

/// A planner config that advises (a buffered file, an engine that takes
/// advice) with a backward read-ahead window of `window` blocks.
fn advising(combine: usize, backward: bool, window: u64) -> PlanConfig {
    PlanConfig {
        advice_possible: true,
        backward_readahead: window,
        ..cfg(16, combine, backward, false)
    }
}

/// A cold scan down the whole file, with and without backward combining:
/// its read-ahead windows go down the file one below the other, each
/// advised once, before the scan's reads reach it, and together they cover
/// everything below the first reads.
#[test]
fn a_descending_scan_advises_its_windows_ahead_of_its_reads() {
    for (combine, backward) in [(16, true), (8, true), (16, false)] {
        let n = 2000u64;
        let window = 128u64;
        let seq: Vec<u64> = (0..n).rev().collect();
        let o = drive(&seq, n, &[], advising(combine, backward, window), 1, 7, 0);
        assert_eq!(o.out, oracle(&seq, n));
        assert!(o.sim.violations.is_empty(), "{:?}", o.sim.violations);
        let adv = &o.sim.advised;
        assert!(!adv.is_empty(), "combine {combine}: no window advised");
        // Each window right below the one before, none larger than asked.
        for w in adv.windows(2) {
            assert_eq!(w[1].0 + w[1].1, w[0].0, "windows {w:?} not adjacent");
        }
        assert!(adv.iter().all(|a| a.1 <= window), "{adv:?}");
        assert_eq!(adv.last().map(|a| a.0), Some(0), "down to block 0: {adv:?}");
        // Coverage: from the first window's top down to 0, each block once.
        let covered: u64 = adv.iter().map(|a| a.1).sum();
        assert_eq!(covered, adv[0].0 + adv[0].1);
        assert!(
            covered >= n - 3 * combine as u64,
            "combine {combine}: windows cover {covered} of {n} blocks"
        );
        // Ahead of the scan: when a window was advised, every read so far
        // lay above it.
        for &(low, len, started) in adv {
            for r in &o.sim.reads[..started] {
                assert!(
                    r.0 >= low + len,
                    "read {r:?} reached window {low}+{len} first"
                );
            }
        }
        // Windows are advised half a window ahead: no read starts below
        // the lowest window advised before it.
        for (i, r) in o.sim.reads.iter().enumerate() {
            let low = adv.iter().filter(|a| a.2 <= i).map(|a| a.0).min();
            if let Some(low) = low {
                assert!(
                    r.0 >= low,
                    "read {i} {r:?} below every window advised ({low})"
                );
            }
        }
    }
}

/// No window where it cannot help or was not asked for: ascending and
/// random scans, advice off or not taken, no kernel read-ahead, a window
/// of 0.
#[test]
fn no_read_ahead_window_unless_a_scan_descends_with_advice() {
    let n = 1000u64;
    let down: Vec<u64> = (0..n).rev().collect();
    let up: Vec<u64> = (0..n).collect();
    let mut random = up.clone();
    crate::testing::SplitMix::new(3).shuffle(&mut random);
    let cases: Vec<(&str, &[u64], PlanConfig)> = vec![
        ("ascending", &up, advising(16, true, 128)),
        ("random", &random, advising(1, true, 128)),
        ("no window", &down, advising(16, true, 0)),
        (
            "advice not taken",
            &down,
            PlanConfig {
                advice_possible: false,
                ..advising(16, true, 128)
            },
        ),
        (
            "advice never",
            &down,
            PlanConfig {
                advice: AdvicePolicy::Never,
                ..advising(16, true, 128)
            },
        ),
        (
            "no kernel read-ahead",
            &down,
            PlanConfig {
                kernel_readahead: false,
                ..advising(16, true, 128)
            },
        ),
    ];
    for (name, seq, c) in cases {
        let o = drive(seq, n, &[], c, 1, 5, 0);
        assert_eq!(o.out, oracle(seq, n), "{name}");
        assert!(o.sim.advised.is_empty(), "{name}: {:?}", o.sim.advised);
    }
}

/// A reset forgets the descent: the next reads start a new one (a window
/// only after three reads in a row go down again), wherever the old one's
/// windows had reached.
#[test]
fn reset_forgets_the_descent() {
    let n = 1000u64;
    let seq: Vec<u64> = (0..n).rev().collect();
    let mut sim = Sim::new(&seq, n, &[], 10_000, 8);
    let mut p: Planner<usize> = Planner::new(advising(8, true, 64));
    let mut out = 0;
    while out < 200 {
        out += usize::from(step(&mut p, &mut sim).expect("1000 blocks to go"));
    }
    assert!(!sim.advised.is_empty(), "a window before the reset");
    assert!(p.advised_low.is_some() && p.descent >= 2);
    p.reset(&mut sim);
    assert_eq!((p.last_read, p.descent, p.advised_low), (None, 0, None));
}

/// A window no larger than two reads is not advised: the reads' own advice
/// covers as much.
#[test]
fn a_window_as_small_as_the_reads_is_not_advised() {
    let n = 1000u64;
    let seq: Vec<u64> = (0..n).rev().collect();
    for window in [1u64, 16, 32] {
        let o = drive(&seq, n, &[], advising(16, true, window), 1, 2, 0);
        assert_eq!(o.out, oracle(&seq, n));
        assert!(
            o.sim.advised.is_empty(),
            "window {window}: {:?}",
            o.sim.advised
        );
    }
    let o = drive(&seq, n, &[], advising(16, true, 33), 1, 2, 0);
    assert!(
        !o.sim.advised.is_empty(),
        "a window of 33 blocks over reads of 16"
    );
}

/// A dense bitmap: of every three blocks, the first two are wanted.
fn dense_bitmap(n: u64) -> Vec<u64> {
    (0..n).filter(|b| b % 3 != 2).collect()
}

/// Runs `seq` to its end through `step`; returns the blocks handed out.
fn scan_all(p: &mut Planner<usize>, sim: &mut Sim) -> u64 {
    let mut out = 0;
    while let Some(page) = step(p, sim) {
        out += u64::from(page);
    }
    out
}

#[test]
fn a_dense_bitmap_is_read_through_its_holes() {
    let n = 3000;
    let seq = dense_bitmap(n);
    let mut reads = Vec::new();
    for gap_limit in [0, 1] {
        let c = PlanConfig {
            gap_limit,
            ..cfg(8, 16, true, true)
        };
        let mut sim = Sim::new(&seq, n, &[], 10_000, 16);
        sim.gap_limit = gap_limit;
        let mut p: Planner<usize> = Planner::new(c);
        assert_eq!(scan_all(&mut p, &mut sim), seq.len() as u64);
        assert!(sim.violations.is_empty(), "{:?}", sim.violations);
        assert_eq!(sim.pins(), 0);
        assert_eq!(p.stats.gap_blocks, sim.gap_blocks as u64);
        assert_eq!(
            p.stats.blocks_read,
            seq.len() as u64 + p.stats.gap_blocks,
            "every wanted block read once, and the holes"
        );
        reads.push((sim.reads.len(), p.stats.gap_blocks));
    }
    // Without gaps every read is one run of two blocks; through them, reads
    // of 16 blocks, a third of them holes.
    assert_eq!(reads[0], (seq.len() / 2, 0));
    let (through, holes) = reads[1];
    assert!(through < n as usize / 14, "{through} reads of {n} blocks");
    assert!(holes > n / 4 && holes < n / 3, "{holes} holes read");
}

#[test]
fn a_hole_the_pool_holds_ends_the_read_before_it() {
    // Blocks 0, 1, 3, 4 wanted; 2 is a hole, cached. The read stops before
    // the hole (its frame is not read into) and the next one starts after.
    let seq = vec![0, 1, 3, 4];
    let c = PlanConfig {
        gap_limit: 2,
        ..cfg(4, 16, true, true)
    };
    let mut sim = Sim::new(&seq, 10, &[2], 10_000, 16);
    sim.gap_limit = 2;
    let mut p: Planner<usize> = Planner::new(c);
    assert_eq!(scan_all(&mut p, &mut sim), 4);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(sim.reads, vec![(0, 2, false), (3, 2, false)]);
    assert_eq!((p.stats.gap_blocks, sim.pins()), (0, 0));
    // Uncached, the hole is read through: one read.
    let mut sim = Sim::new(&seq, 10, &[], 10_000, 16);
    sim.gap_limit = 2;
    let mut p: Planner<usize> = Planner::new(c_full_gap(2));
    assert_eq!(scan_all(&mut p, &mut sim), 4);
    assert_eq!(sim.reads, vec![(0, 5, false)]);
    assert_eq!((p.stats.gap_blocks, sim.pins()), (1, 0));
}

fn c_full_gap(gap_limit: usize) -> PlanConfig {
    PlanConfig {
        gap_limit,
        ..cfg(4, 16, true, true)
    }
}

#[test]
fn holes_wider_than_the_limit_or_the_read_are_not_read() {
    // Gaps of 2 with a limit of 1: no read through them.
    let seq: Vec<u64> = (0..20).map(|i| 3 * i).collect();
    let mut sim = Sim::new(&seq, 60, &[], 10_000, 16);
    sim.gap_limit = 1;
    let mut p: Planner<usize> = Planner::new(c_full_gap(1));
    assert_eq!(scan_all(&mut p, &mut sim), 20);
    assert_eq!((sim.reads.len(), p.stats.gap_blocks), (20, 0));
    // A limit of 2: reads of at most 16 blocks, each from a wanted block to
    // a wanted block (6 of them, 10 holes), so 4 reads for 20 blocks.
    let mut sim = Sim::new(&seq, 60, &[], 10_000, 16);
    sim.gap_limit = 2;
    let mut p: Planner<usize> = Planner::new(c_full_gap(2));
    assert_eq!(scan_all(&mut p, &mut sim), 20);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(sim.reads.iter().all(|r| r.1 <= 16 && r.0 % 3 == 0));
    assert_eq!(sim.reads.len(), 4);
    assert_eq!(p.stats.gap_blocks, 2 * (20 - 4));
}
