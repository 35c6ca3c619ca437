//! When to hedge a GET: a threshold derived from the first-byte latencies
//! the engine has observed.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How the engine hedges stragglers: a GET whose response has not begun
/// within the threshold is issued a second time, the first of the two to
/// finish fills the frames and the other is cancelled.
///
/// The threshold is the `percentile` of the last [`WINDOW`] first-byte
/// latencies observed (the time from sending a GET to its response
/// headers), never below `floor`; until `min_samples` latencies have been
/// observed it is `initial`. A waiting GET looks at the threshold again as
/// latencies come in, and it is hedged once it has waited that long *and*
/// it is among the last `1 − percentile` (at least the last one) still
/// waiting of the GETs sent within `floor` of it, before or after, or
/// none of those has answered for the threshold: a straggler is slow
/// while the GETs sent with it have answered. GETs sent
/// together (a stream's first look-ahead sends all of them at once) answer
/// over a spread that only the fastest of them have shown when the
/// threshold is first known; the rest are not stragglers but the client or
/// server at work. A GET sent alone is hedged on the threshold alone. Hedging
/// at the 95th percentile re-issues about one GET in twenty on a healthy
/// store, which is what a hedge costs; on a store where one GET in twenty
/// stalls for seconds it bounds every GET's wait to about the threshold
/// plus one healthy GET.
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
    /// The threshold's lower bound: a GET is never hedged sooner. Also the
    /// width of a GET's cohort (the GETs sent within `floor` of it) and how
    /// often a waiting GET looks at the threshold again (at least every
    /// millisecond). At most [`MAX_WAIT`].
    pub floor: Duration,
    /// The threshold before `min_samples` latencies have been observed. At
    /// most [`MAX_WAIT`].
    pub initial: Duration,
    /// Latencies observed before the percentile is trusted.
    pub min_samples: usize,
}

/// The longest [`Hedging::floor`] and [`Hedging::initial`] are taken to
/// be: an hour (a longer one means the same: no hedging in practice).
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

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
    /// Recent GETs, in the order they were sent: sequence number, when
    /// sent, when their wait ended.
    sends: VecDeque<(u64, Instant, Option<Instant>)>,
    sent: u64,
}

/// Sends remembered for finding a GET's cohort.
const SENDS: usize = 8192;

/// A GET waiting for its response, registered with [`Latencies::sent`];
/// dropping it ends the wait (answered, failed or cancelled alike).
#[derive(Debug)]
pub(crate) struct Waiting<'a> {
    latencies: &'a Latencies,
    seq: u64,
    at: Instant,
}

impl Waiting<'_> {
    /// Whether this GET straggles: it is among the last `1 − percentile`
    /// (at least the last one) still waiting of its cohort, the GETs sent
    /// within the hedging floor before or after it; or none of its cohort
    /// has answered for `threshold` (stragglers that came together).
    pub(crate) fn straggling(&self, threshold: Duration) -> bool {
        let l = self.latencies;
        let r = l.state.lock().unwrap_or_else(|p| p.into_inner());
        let window = l.recheck();
        let lo = self.at.checked_sub(window).unwrap_or(self.at);
        let hi = self.at + window;
        // Sends are in order, their instants too.
        let first = r.sends.partition_point(|s| s.1 < lo);
        let end = r.sends.partition_point(|s| s.1 <= hi).max(first);
        let (mut size, mut still, mut last) = (0usize, 0usize, None::<Instant>);
        for s in r.sends.range(first..end) {
            size += 1;
            match s.2 {
                None => still += 1,
                Some(t) => last = Some(last.map_or(t, |l| l.max(t))),
            }
        }
        let tail = ((1.0 - l.hedging.percentile.min(1.0)) * size as f64).floor() as usize;
        if still <= tail.max(1) {
            return true;
        }
        last.unwrap_or(self.at).elapsed() >= threshold
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut r = self
            .latencies
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let front = r.sends.front().map_or(0, |s| s.0);
        if let Some(s) = self
            .seq
            .checked_sub(front)
            .and_then(|i| r.sends.get_mut(i as usize))
        {
            s.2 = Some(Instant::now());
        }
    }
}

impl Latencies {
    pub(crate) fn new(mut hedging: Hedging) -> Self {
        // Waits are added to instants: bound them so none overflows.
        hedging.floor = hedging.floor.min(MAX_WAIT);
        hedging.initial = hedging.initial.min(MAX_WAIT);
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

    /// Registers a GET just sent, until the returned guard is dropped.
    pub(crate) fn sent(&self) -> Waiting<'_> {
        let at = Instant::now();
        let mut r = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let seq = r.sent;
        r.sent += 1;
        if r.sends.len() == SENDS {
            r.sends.pop_front();
        }
        // Instants in order, whichever thread sent first.
        let at = r.sends.back().map_or(at, |s| s.1.max(at));
        r.sends.push_back((seq, at, None));
        Waiting {
            latencies: self,
            seq,
            at,
        }
    }

    /// How often a GET waiting for its response looks at the threshold
    /// again: the floor (at least a millisecond).
    pub(crate) fn recheck(&self) -> Duration {
        self.hedging.floor.max(Duration::from_millis(1))
    }

    /// How long to wait for a GET's response before hedging it; `None`:
    /// never.
    /// Whether the threshold comes from observed latencies (not the
    /// initial guess).
    pub(crate) fn learned(&self) -> bool {
        let r = self.state.lock().unwrap_or_else(|p| p.into_inner());
        r.threshold.is_some()
    }

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
        // Waits that would overflow an instant are an hour.
        let h = Hedging::default()
            .with_initial(Duration::MAX)
            .with_floor(Duration::MAX);
        let l = Latencies::new(h);
        assert_eq!(l.threshold(), Some(MAX_WAIT));
        assert_eq!(l.recheck(), MAX_WAIT);
        let _ = std::time::Instant::now() + l.threshold().unwrap() + l.recheck();
        for p in [0.0, -0.5, 1.5, f64::NAN] {
            let h = Hedging::default().with_percentile(p);
            assert!(h.is_off(), "{p}");
            assert_eq!(Latencies::new(h).threshold(), None, "{p}");
        }
    }

    #[test]
    fn a_get_straggles_once_most_sent_with_it_have_answered() {
        let l = Latencies::new(Hedging::default().with_floor(ms(200)));
        // 40 GETs sent together: the last 2 (5%) of them to answer are
        // stragglers, whichever they are.
        let mut gets: Vec<Waiting<'_>> = (0..40).map(|_| l.sent()).collect();
        let seventh = gets.remove(7);
        let last = gets.pop().expect("40");
        let long = Duration::from_secs(3600);
        assert!(!seventh.straggling(long) && !last.straggling(long));
        gets.truncate(1);
        assert!(
            !seventh.straggling(long),
            "three wait: 7, one of the rest, the last"
        );
        // None of them has answered for a threshold: all three straggle.
        std::thread::sleep(ms(5));
        assert!(seventh.straggling(ms(1)));
        drop(gets);
        assert!(seventh.straggling(long) && last.straggling(long));
        drop((seventh, last));
        // A GET sent alone straggles on the threshold alone.
        let l = Latencies::new(Hedging::default().with_floor(ms(1)));
        let alone = l.sent();
        assert!(alone.straggling(long));
        // GETs sent well after it are not its cohort.
        std::thread::sleep(ms(20));
        let _later: Vec<Waiting<'_>> = (0..10).map(|_| l.sent()).collect();
        assert!(alone.straggling(long));
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
