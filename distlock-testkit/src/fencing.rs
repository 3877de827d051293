//! A resource that checks fencing tokens, like a storage service should.
//!
//! Lock holders write to it with their token. A write with a token lower
//! than one already seen comes from a holder whose lock was taken away
//! (paused, partitioned, expired) and is rejected: that is the write the
//! fencing token exists to stop. Tests assert that such writes happened
//! only where expected and were all rejected.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// A write rejected because a higher token was already seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleToken {
    /// The token the writer presented.
    pub presented: u64,
    /// The highest token seen before this write.
    pub highest: u64,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stale fencing token {} (highest seen is {})",
            self.presented, self.highest
        )
    }
}

impl std::error::Error for StaleToken {}

/// An in-memory resource that accepts a write only if its fencing token is
/// at least the highest token seen so far. Clones share the same state;
/// it is `Send + Sync`, so tasks and threads can share it.
#[derive(Debug, Clone, Default)]
pub struct FencedResource {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    highest: Option<u64>,
    last: Option<(u64, String)>,
    accepted: u64,
    rejected: u64,
}

impl FencedResource {
    /// An empty resource that has seen no token.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes `value` with `token`. Accepted if `token` is at least the
    /// highest token seen (equal: the same holder writing again); else
    /// rejected, counted in [`FencedResource::rejected`], and the value is
    /// not stored.
    pub fn write(&self, token: u64, value: impl Into<String>) -> Result<(), StaleToken> {
        let mut state = self.lock();
        if let Some(highest) = state.highest.filter(|&highest| token < highest) {
            state.rejected += 1;
            return Err(StaleToken {
                presented: token,
                highest,
            });
        }
        state.highest = Some(token);
        state.last = Some((token, value.into()));
        state.accepted += 1;
        Ok(())
    }

    /// The highest token accepted so far, `None` before the first write.
    pub fn highest(&self) -> Option<u64> {
        self.lock().highest
    }

    /// The token and value of the last accepted write.
    pub fn last_write(&self) -> Option<(u64, String)> {
        self.lock().last.clone()
    }

    /// How many writes were accepted.
    pub fn accepted(&self) -> u64 {
        self.lock().accepted
    }

    /// How many writes were rejected as stale: each one is a holder that
    /// still believed it held the lock after losing it.
    pub fn rejected(&self) -> u64 {
        self.lock().rejected
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is updated in one step, so it is valid even if a
        // panicking thread poisoned the lock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
