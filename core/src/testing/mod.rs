//! Test engines and the conformance suite (feature `testing`).
//!
//! - [`MemEngine`]: the reference engine, over in-memory files; reads
//!   complete inline.
//! - Wrappers, each around any engine: [`Delayed`] adds latency (and jitter,
//!   which reorders completions) through an injected [`Timer`] and reports
//!   the latency it achieved; [`Capped`] caps reads in flight; [`Faulty`]
//!   injects EIO at chosen blocks and random short reads; [`Stall`] holds
//!   reads of chosen blocks until cancelled.
//! - [`stamp`]: deterministic page contents every test can verify byte for
//!   byte.
//! - [`conformance`]: the scenarios every engine's tests run.
//! - [`sim`]: a deterministic simulation of many streams on one pool over a
//!   simulated engine with seeded faults, latencies and reordering.
//! - [`files`]: stamped temp files on disk ([`StampedFile`]) and the
//!   conformance harness over them ([`DiskFiles`]), for the tests of
//!   engines that read real files; std only.
//! - [`require`]: what a test needing an outside program or kernel feature
//!   does when it is missing (skip with a printed reason; fail under
//!   `CI=true`).
//!
//! Not a stable API: it changes with the engines' needs.

pub mod conformance;
pub mod files;
mod mem;
mod require;
pub mod sim;
pub mod stamp;
mod timer;
mod wrappers;

pub use files::{DiskFiles, NotRegularFiles, StampedFile};
pub use mem::{MemEngine, MemFile};
pub use require::{in_ci, require, require_named};
pub use timer::{ThreadTimer, Timer};
pub use wrappers::{Capped, Delayed, FaultPlan, Faulty, LatencyStats, PanicOnFinish, Stall};

/// A small deterministic PRNG (SplitMix64) for tests and wrappers, so core
/// needs no `rand`.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Shuffles a slice (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}
