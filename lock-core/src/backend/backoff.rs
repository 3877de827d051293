//! Backoff policies for retrying transient errors and for polling fallbacks.
//!
//! A [`Backoff`] is a description; [`Backoff::delays`] turns it into an
//! iterator of waits, where `None` means "stop retrying".

use std::time::Duration;

/// How long to wait before each retry, and when to give up.
#[derive(Clone, Debug, PartialEq)]
pub struct Backoff {
    kind: Kind,
    max_retries: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Zero,
    Stop,
    Constant(Duration),
    Exponential {
        initial: Duration,
        cap: Duration,
        jitter: bool,
    },
    Fixed(Vec<Duration>),
}

impl Backoff {
    /// Retry at once, forever.
    pub fn zero() -> Self {
        Self::of(Kind::Zero)
    }

    /// Never retry.
    pub fn stop() -> Self {
        Self::of(Kind::Stop)
    }

    /// Wait `delay` before every retry, forever.
    pub fn constant(delay: Duration) -> Self {
        Self::of(Kind::Constant(delay))
    }

    /// Double the wait each time, starting at `initial` and never above
    /// `cap`, forever. Without jitter the waits are exact.
    pub fn exponential(initial: Duration, cap: Duration) -> Self {
        Self::of(Kind::Exponential {
            initial,
            cap: cap.max(initial),
            jitter: false,
        })
    }

    /// Wait each delay of `delays` in turn, then stop.
    pub fn fixed(delays: impl IntoIterator<Item = Duration>) -> Self {
        Self::of(Kind::Fixed(delays.into_iter().collect()))
    }

    /// With jitter, each exponential wait is drawn uniformly from
    /// `[d/2, d]`, so clients that failed together do not retry together.
    /// Other policies are unaffected.
    pub fn with_jitter(mut self) -> Self {
        if let Kind::Exponential { jitter, .. } = &mut self.kind {
            *jitter = true;
        }
        self
    }

    /// Stop after `retries` waits at most.
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = Some(retries);
        self
    }

    /// The waits of this policy, in order; `None` means give up.
    pub fn delays(&self) -> Delays {
        Delays {
            policy: self.clone(),
            attempt: 0,
        }
    }

    fn of(kind: Kind) -> Self {
        Self {
            kind,
            max_retries: None,
        }
    }
}

/// The waits of a [`Backoff`], produced one by one.
#[derive(Clone, Debug)]
pub struct Delays {
    policy: Backoff,
    attempt: u32,
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let attempt = self.attempt;
        if self.policy.max_retries.is_some_and(|max| attempt >= max) {
            return None;
        }
        self.attempt = self.attempt.saturating_add(1);
        match &self.policy.kind {
            Kind::Zero => Some(Duration::ZERO),
            Kind::Stop => None,
            Kind::Constant(delay) => Some(*delay),
            Kind::Exponential {
                initial,
                cap,
                jitter,
            } => {
                let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
                let delay = initial.saturating_mul(factor).min(*cap);
                Some(if *jitter { equal_jitter(delay) } else { delay })
            }
            Kind::Fixed(delays) => delays.get(attempt as usize).copied(),
        }
    }
}

/// A wait drawn uniformly from `[delay/2, delay]`.
fn equal_jitter(delay: Duration) -> Duration {
    let half = delay / 2;
    let spread = (delay - half).as_nanos() as u64;
    half + Duration::from_nanos(fastrand::u64(0..=spread))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn zero_retries_at_once_forever() {
        assert!(Backoff::zero().delays().take(100).all(|d| d.is_zero()));
    }

    #[test]
    fn stop_never_retries() {
        assert_eq!(Backoff::stop().delays().next(), None);
    }

    #[test]
    fn constant_repeats_its_delay() {
        let delays: Vec<_> = Backoff::constant(5 * MS).delays().take(3).collect();
        assert_eq!(delays, [5 * MS; 3]);
    }

    #[test]
    fn exponential_doubles_up_to_the_cap() {
        let delays: Vec<_> = Backoff::exponential(MS, 10 * MS).delays().take(6).collect();
        assert_eq!(delays, [MS, 2 * MS, 4 * MS, 8 * MS, 10 * MS, 10 * MS]);
    }

    #[test]
    fn exponential_survives_many_attempts_without_overflow() {
        let last = Backoff::exponential(MS, Duration::from_secs(1))
            .delays()
            .nth(10_000);
        assert_eq!(last, Some(Duration::from_secs(1)));
    }

    #[test]
    fn jitter_stays_within_half_and_full_delay() {
        let policy = Backoff::exponential(8 * MS, 64 * MS).with_jitter();
        for _ in 0..50 {
            for (attempt, delay) in policy.delays().take(5).enumerate() {
                let full = (8 * MS * (1 << attempt)).min(64 * MS);
                assert!(delay >= full / 2 && delay <= full, "{delay:?} vs {full:?}");
            }
        }
    }

    #[test]
    fn fixed_list_then_stop() {
        let delays: Vec<_> = Backoff::fixed([MS, 3 * MS]).delays().collect();
        assert_eq!(delays, [MS, 3 * MS]);
    }

    #[test]
    fn max_retries_limits_any_policy() {
        assert_eq!(Backoff::zero().max_retries(4).delays().count(), 4);
        assert_eq!(Backoff::constant(MS).max_retries(0).delays().count(), 0);
    }
}
