//! Access patterns: which blocks a scan reads, in which order.
//!
//! Every pattern is a list of block numbers computed before the timed run, so
//! every engine reads exactly the same blocks in the same order, and
//! generating the list costs nothing inside the timing.

use pagestream::testing::SplitMix;
use std::fmt;
use std::str::FromStr;

/// An access pattern over the blocks `0..nblocks` of a file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pattern {
    /// Every block, ascending.
    Forward,
    /// Every block, descending.
    Backward,
    /// Every block once, in a seeded random order (Fisher–Yates shuffle).
    Random,
    /// `round(density × nblocks)` distinct blocks (at least one), chosen
    /// with a seed, ascending: a bitmap heap scan's block list.
    Bitmap(f64),
}

impl Pattern {
    /// The pattern's name as the command line spells it (`bitmap:0.01`).
    pub fn name(&self) -> String {
        match self {
            Pattern::Forward => "forward".into(),
            Pattern::Backward => "backward".into(),
            Pattern::Random => "random".into(),
            Pattern::Bitmap(d) => format!("bitmap:{d}"),
        }
    }

    /// The blocks this pattern reads from a file of `nblocks` blocks, in
    /// order; `seed` drives `random` and `bitmap`.
    pub fn blocks(&self, nblocks: u64, seed: u64) -> Vec<u64> {
        match *self {
            Pattern::Forward => (0..nblocks).collect(),
            Pattern::Backward => (0..nblocks).rev().collect(),
            Pattern::Random => {
                let mut v: Vec<u64> = (0..nblocks).collect();
                let mut rng = SplitMix::new(seed);
                shuffle_prefix(&mut v, nblocks as usize, &mut rng);
                v
            }
            Pattern::Bitmap(d) => {
                let k = bitmap_count(nblocks, d) as usize;
                let mut v: Vec<u64> = (0..nblocks).collect();
                let mut rng = SplitMix::new(seed ^ 0xB17B_A9B1_7BA9_0001);
                shuffle_prefix(&mut v, k, &mut rng);
                v.truncate(k);
                v.sort_unstable();
                v
            }
        }
    }
}

/// How many blocks `bitmap:density` selects from `nblocks`:
/// `round(density × nblocks)`, at least 1 when `nblocks > 0`.
pub fn bitmap_count(nblocks: u64, density: f64) -> u64 {
    if nblocks == 0 {
        return 0;
    }
    ((density * nblocks as f64).round() as u64).clamp(1, nblocks)
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for Pattern {
    type Err = String;

    /// Parses `forward`, `backward`, `random` or `bitmap:DENSITY` with
    /// `0 < DENSITY <= 1`.
    fn from_str(s: &str) -> Result<Pattern, String> {
        match s {
            "forward" => Ok(Pattern::Forward),
            "backward" => Ok(Pattern::Backward),
            "random" => Ok(Pattern::Random),
            _ => {
                let Some(d) = s.strip_prefix("bitmap:") else {
                    return Err(format!(
                        "{s:?}: expected forward, backward, random or bitmap:DENSITY"
                    ));
                };
                match d.parse::<f64>() {
                    Ok(x) if x > 0.0 && x <= 1.0 => Ok(Pattern::Bitmap(x)),
                    _ => Err(format!(
                        "{s:?}: the bitmap density must be a number above 0 and at most 1 \
                         (e.g. bitmap:0.01)"
                    )),
                }
            }
        }
    }
}

/// Shuffles so that `v[..k]` is a uniform random selection in random order
/// (the first `k` steps of Fisher–Yates).
fn shuffle_prefix(v: &mut [u64], k: usize, rng: &mut SplitMix) {
    let n = v.len();
    for i in 0..k.min(n) {
        let j = i + rng.below((n - i) as u64) as usize;
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_cover_what_they_say() {
        let n = 1000;
        assert_eq!(Pattern::Forward.blocks(n, 1), (0..n).collect::<Vec<_>>());
        assert_eq!(
            Pattern::Backward.blocks(n, 1),
            (0..n).rev().collect::<Vec<_>>()
        );
        let r = Pattern::Random.blocks(n, 7);
        assert_ne!(r, Pattern::Forward.blocks(n, 7));
        let mut s = r.clone();
        s.sort_unstable();
        assert_eq!(s, (0..n).collect::<Vec<_>>(), "every block once");
        assert_eq!(r, Pattern::Random.blocks(n, 7), "seeded");
        assert_ne!(r, Pattern::Random.blocks(n, 8));
        let b = Pattern::Bitmap(0.1).blocks(n, 3);
        assert_eq!(b.len(), 100);
        assert!(b.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
        assert_eq!(Pattern::Bitmap(1.0).blocks(n, 3).len(), 1000);
        assert_eq!(Pattern::Bitmap(0.0001).blocks(n, 3).len(), 1);
    }

    #[test]
    fn parse() {
        assert_eq!("forward".parse(), Ok(Pattern::Forward));
        assert_eq!("bitmap:0.5".parse(), Ok(Pattern::Bitmap(0.5)));
        for bad in ["", "fwd", "bitmap:", "bitmap:0", "bitmap:1.5", "bitmap:x"] {
            assert!(bad.parse::<Pattern>().is_err(), "{bad}");
        }
    }
}
