//! [`Figures`]: what a run did, as the register counts it.

use serde::{Deserialize, Serialize};

/// What a run did, as counted by the register.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Holds taken (`Begin` and `BeginRead` operations): locks,
    /// leaderships, permits, and read-write locks' writers and readers.
    pub acquisitions: u64,
    /// Of those, leaderships won.
    pub leaderships: u64,
    /// Of those, semaphore permits taken.
    pub permits: u64,
    /// Writes the fencing check accepted (not readers' reads).
    pub writes_accepted: u64,
    /// Operations refused because a newer holder had presented a higher
    /// token: a replaced holder fenced off.
    pub stale_rejected: u64,
    /// Operations the fencing check accepted from a replaced holder, or
    /// with a token another client had used.
    pub unsafe_accepted: u64,
    /// Holders that reported their lock held after another client had
    /// begun holding it (counted once per replaced holding); and holdings
    /// whose report shows, at one instant, more permit holders than a
    /// semaphore has permits, or a read-write lock's writer beside
    /// anyone (counted once per such holding).
    pub overlaps: u64,
    /// New holders whose token was not above one presented before.
    pub token_regressions: u64,
    /// Losses the clients were told about.
    pub losses: u64,
    /// Waits that ended without the lock.
    pub gave_up: u64,
    /// The longest time, in milliseconds, in which a client waited for a
    /// key while no client held it.
    pub longest_idle_wait_ms: u64,
}

impl Figures {
    /// Overlaps, unsafe writes accepted and token regressions.
    pub(super) fn violations(&self) -> (u64, u64, u64) {
        (self.overlaps, self.unsafe_accepted, self.token_regressions)
    }

    /// The violation counted since `before` (from [`violations`](Self::violations)),
    /// in words, if one was.
    pub(super) fn new_violation(&self, before: (u64, u64, u64)) -> Option<&'static str> {
        let now = self.violations();
        match () {
            _ if now == before => None,
            _ if now.0 > before.0 => Some("an overlap"),
            _ if now.1 > before.1 => Some("an unsafe write accepted"),
            _ => Some("a token regression"),
        }
    }
}
