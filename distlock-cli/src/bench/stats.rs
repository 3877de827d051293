//! Percentiles and Jain's fairness index.

use std::time::{Duration, Instant};

/// A latency distribution, summarised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Summary {
    /// Number of samples.
    pub(crate) n: usize,
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) mean: Duration,
}

impl Summary {
    /// Summarises `samples` (in any order); `None` if there are none.
    pub(crate) fn of(samples: &[Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let total: Duration = sorted.iter().sum();
        let n = sorted.len();
        Some(Self {
            n,
            p50: percentile(&sorted, 50.0),
            p99: percentile(&sorted, 99.0),
            mean: total / u32::try_from(n).unwrap_or(u32::MAX),
        })
    }
}

/// The `p`-th percentile of `sorted` (ascending, not empty) by the
/// nearest-rank method: the smallest sample with at least `p`% of the
/// samples at or below it. No interpolation, so the result is always a
/// latency that was actually measured.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    debug_assert!(!sorted.is_empty());
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Hand-overs (a release to the next holder), timed from the call that
/// gave the lock up and from its return. The next holder may get the lock
/// before that call returns (the store tells it first); such a hand-over
/// is counted, never clamped to zero.
#[derive(Debug, Default)]
pub(crate) struct Handovers {
    /// From the call's return to the next holder, for the hand-overs that
    /// came after the return.
    pub(crate) after_return: Vec<Duration>,
    /// From the call to the next holder, for every hand-over.
    pub(crate) from_call: Vec<Duration>,
    /// Hand-overs complete before the call returned.
    pub(crate) before_return: usize,
}

impl Handovers {
    /// Records one hand-over: the call made at `called`, returned at
    /// `returned`, the next holder had the lock at `taken`.
    pub(crate) fn record(&mut self, called: Instant, returned: Instant, taken: Instant) {
        self.from_call.push(taken.saturating_duration_since(called));
        match taken.checked_duration_since(returned) {
            Some(after) => self.after_return.push(after),
            None => self.before_return += 1,
        }
    }

    /// How many hand-overs were recorded.
    pub(crate) fn len(&self) -> usize {
        self.from_call.len()
    }
}

/// Jain's fairness index of per-client counts: `(Σx)² / (n·Σx²)`. 1.0 when
/// every client did the same amount of work, 1/n when one client did it
/// all; `None` when there are no clients or no work.
pub(crate) fn jain_index(counts: &[u64]) -> Option<f64> {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let sum_of_squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if counts.is_empty() || sum_of_squares == 0.0 {
        return None;
    }
    Some(sum * sum / (counts.len() as f64 * sum_of_squares))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_overs_before_the_return_are_counted_not_clamped() {
        let called = Instant::now();
        let returned = called + Duration::from_millis(3);
        let mut handovers = Handovers::default();
        handovers.record(called, returned, called + Duration::from_millis(1));
        handovers.record(called, returned, called + Duration::from_millis(5));
        assert_eq!(handovers.before_return, 1);
        assert_eq!(handovers.after_return, [Duration::from_millis(2)]);
        assert_eq!(
            handovers.from_call,
            [Duration::from_millis(1), Duration::from_millis(5)]
        );
        assert_eq!(handovers.len(), 2);
    }

    fn ms(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        values.into_iter().map(Duration::from_millis).collect()
    }

    #[test]
    fn percentiles_of_one_to_a_hundred() {
        let sorted = ms(1..=100);
        assert_eq!(percentile(&sorted, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&sorted, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&sorted, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&sorted, 0.0), Duration::from_millis(1));
    }

    #[test]
    fn percentiles_of_small_samples_are_measured_values() {
        assert_eq!(percentile(&ms([7]), 50.0), Duration::from_millis(7));
        assert_eq!(percentile(&ms([7]), 99.0), Duration::from_millis(7));
        let sorted = ms([1, 2, 3, 4]);
        assert_eq!(percentile(&sorted, 50.0), Duration::from_millis(2));
        assert_eq!(percentile(&sorted, 99.0), Duration::from_millis(4));
    }

    #[test]
    fn summary_sorts_and_averages() {
        let summary = Summary::of(&ms([30, 10, 20])).unwrap();
        assert_eq!(summary.n, 3);
        assert_eq!(summary.p50, Duration::from_millis(20));
        assert_eq!(summary.p99, Duration::from_millis(30));
        assert_eq!(summary.mean, Duration::from_millis(20));
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn jain_index_is_one_for_equal_counts() {
        assert_eq!(jain_index(&[5, 5, 5, 5]), Some(1.0));
        assert_eq!(jain_index(&[1]), Some(1.0));
    }

    #[test]
    fn jain_index_is_one_over_n_when_one_client_does_everything() {
        let index = jain_index(&[100, 0, 0, 0]).unwrap();
        assert!((index - 0.25).abs() < 1e-12, "{index}");
    }

    #[test]
    fn jain_index_in_between_and_undefined() {
        // (1+3)² / (2·(1+9)) = 16/20
        assert!((jain_index(&[1, 3]).unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(jain_index(&[]), None);
        assert_eq!(jain_index(&[0, 0]), None);
    }
}
