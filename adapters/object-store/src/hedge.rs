//! When to hedge a GET: a threshold derived from the first-byte latencies
//! the engine has observed.

use std::sync::Mutex;
use std::time::Duration;

/// How the engine hedges stragglers: a GET whose response has not begun
/// within the threshold is issued a second time, the first of the two to
/// finish fills the frames and the other is cancelled.
///
/// The threshold is the `percentile` of the last [`WINDOW`] first-byte
/// latencies observed (the time from sending a GET to its response
/// headers), never below `floor`; until `min_samples` latencies have been
/// observed it is `initial`. Hedging at the 95th percentile re-issues about
/// one GET in twenty on a healthy store, which is what a hedge costs; on a
/// store where one GET in twenty stalls for seconds it bounds every GET's
/// wait to about the threshold plus one healthy GET.
///
/// ```
/// use pagestream_object_store::Hedging;
/// use std::time::Duration;
/// let h = Hedging::default().with_floor(Duration::from_millis(20));
/// assert_eq!(h.percentile, 0.95);
/// assert!(Hedging::off().is_off());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Hedging {
    /// The observed latency that sets the threshold, as a fraction
    /// (`0.95`: the 95th percentile). Outside `(0, 1]` (see
    /// [`Hedging::off`]), or NaN: never hedge.
    pub percentile: f64,
    /// The threshold's lower bound: a GET is never hedged sooner.
    pub floor: Duration,
    /// The threshold before `min_samples` latencies have been observed.
    pub initial: Duration,
    /// Latencies observed before the percentile is trusted.
    pub min_samples: usize,
}

/// First-byte latencies the threshold is computed over (the most recent).
pub const WINDOW: usize = 512;

impl Default for Hedging {
    /// The 95th percentile, at least 10 ms; 1 s until 32 latencies are
    /// known.
    fn default() -> Self {
        Hedging {
            percentile: 0.95,
            floor: Duration::from_millis(10),
            initial: Duration::from_secs(1),
            min_samples: 32,
        }
    }
}

impl Hedging {
    /// Never hedge.
    pub fn off() -> Self {
        Hedging {
            percentile: f64::INFINITY,
            ..Hedging::default()
        }
    }

    /// Whether this never hedges.
    pub fn is_off(&self) -> bool {
        !(self.percentile > 0.0 && self.percentile <= 1.0)
    }

    /// Sets [`percentile`](Self::percentile).
    #[must_use]
    pub fn with_percentile(mut self, p: f64) -> Self {
        self.percentile = p;
        self
    }

    /// Sets [`floor`](Self::floor).
    #[must_use]
    pub fn with_floor(mut self, floor: Duration) -> Self {
        self.floor = floor;
        self
    }

    /// Sets [`initial`](Self::initial).
    #[must_use]
    pub fn with_initial(mut self, initial: Duration) -> Self {
        self.initial = initial;
        self
    }

    /// Sets [`min_samples`](Self::min_samples).
    #[must_use]
    pub fn with_min_samples(mut self, n: usize) -> Self {
        self.min_samples = n;
        self
    }
}

/// The last [`WINDOW`] first-byte latencies, and the threshold they give.
#[derive(Debug)]
pub(crate) struct Latencies {
    hedging: Hedging,
    state: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    samples: Vec<Duration>,
    next: usize,
    /// The threshold the samples give (a selection over the window, about
    /// a microsecond per GET).
    threshold: Option<Duration>,
}

impl Latencies {
    pub(crate) fn new(hedging: Hedging) -> Self {
        Latencies {
            hedging,
            state: Mutex::new(Ring::default()),
        }
    }

    /// Records one GET's first-byte latency.
    pub(crate) fn record(&self, d: Duration) {
        let mut r = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if r.samples.len() < WINDOW {
            r.samples.push(d);
        } else {
            let i = r.next;
            r.samples[i] = d;
        }
        r.next = (r.next + 1) % WINDOW;
        r.threshold = self.compute(&r.samples);
    }

    fn compute(&self, samples: &[Duration]) -> Option<Duration> {
        let h = &self.hedging;
        if samples.len() < h.min_samples.max(1) {
            return None;
        }
        let mut window = samples.to_vec();
        let rank = ((window.len() as f64) * h.percentile).ceil() as usize;
        let (_, q, _) = window.select_nth_unstable(rank.clamp(1, samples.len()) - 1);
        Some((*q).max(h.floor))
    }

    /// How long to wait for a GET's response before hedging it; `None`:
    /// never.
    pub(crate) fn threshold(&self) -> Option<Duration> {
        if self.hedging.is_off() {
            return None;
        }
        let r = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Some(
            r.threshold
                .unwrap_or(self.hedging.initial.max(self.hedging.floor)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn threshold_is_the_percentile_with_a_floor() {
        let l = Latencies::new(Hedging::default().with_min_samples(10));
        assert_eq!(l.threshold(), Some(ms(1000)), "before enough samples");
        for i in 1..=100 {
            l.record(ms(i));
        }
        assert_eq!(l.threshold(), Some(ms(95)));
        let l = Latencies::new(Hedging::default().with_min_samples(1).with_floor(ms(50)));
        for _ in 0..100 {
            l.record(ms(3));
        }
        assert_eq!(l.threshold(), Some(ms(50)), "never below the floor");
        assert_eq!(Latencies::new(Hedging::off()).threshold(), None);
        for p in [0.0, -0.5, 1.5, f64::NAN] {
            let h = Hedging::default().with_percentile(p);
            assert!(h.is_off(), "{p}");
            assert_eq!(Latencies::new(h).threshold(), None, "{p}");
        }
    }

    #[test]
    fn old_latencies_leave_the_window() {
        let l = Latencies::new(Hedging::default().with_min_samples(1).with_floor(ms(1)));
        for _ in 0..WINDOW {
            l.record(ms(900));
        }
        assert_eq!(l.threshold(), Some(ms(900)));
        for _ in 0..WINDOW {
            l.record(ms(20));
        }
        assert_eq!(l.threshold(), Some(ms(20)));
    }
}
