//! Retrying a clean-up until the server answers or it no longer matters.
//!
//! An acquisition that ends without the lock leaves work behind (leave
//! the queue, undo a partial Redlock round). It is retried with pauses of
//! 20 ms, doubling up to 1 s, until it went through or the next try would
//! start after a give-up time by which whatever it would remove has
//! expired anyway.

use std::time::{Duration, Instant};

use lock_core::backend::{Backoff, Delays};

/// The first pause between tries of a clean-up.
const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// The longest pause between tries of a clean-up.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// The pauses between the tries of one clean-up.
#[derive(Debug)]
pub(crate) struct CleanupRetry {
    pauses: Delays,
    give_up: Instant,
}

impl CleanupRetry {
    /// Pauses for a clean-up whose last try starts no later than `give_up`.
    pub(crate) fn until(give_up: Instant) -> Self {
        Self {
            pauses: Backoff::exponential(FIRST_PAUSE, LONGEST_PAUSE).delays(),
            give_up,
        }
    }

    /// Sleeps until the next try is due and returns `true`; returns
    /// `false` at once if that try would start after the give-up time.
    pub(crate) async fn pause(&mut self) -> bool {
        let Some(pause) = self.pauses.next() else {
            return false;
        };
        if Instant::now() + pause > self.give_up {
            return false;
        }
        tokio::time::sleep(pause).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn gives_up_without_a_pause_past_the_deadline() {
        let started = Instant::now();
        let mut retry = CleanupRetry::until(started);
        assert!(!retry.pause().await);
        assert!(started.elapsed() < FIRST_PAUSE);
    }

    #[tokio::test]
    async fn pauses_double_until_the_next_would_end_too_late() {
        // 20 + 40 + 80 + 160 + 320 ms fit in a second; 640 more do not.
        let started = Instant::now();
        let mut retry = CleanupRetry::until(started + Duration::from_secs(1));
        let mut pauses = 0;
        while retry.pause().await {
            pauses += 1;
        }
        assert_eq!(pauses, 5);
        assert!(started.elapsed() >= Duration::from_millis(620));
    }
}
