//! Lock states in test assertions: what a holder watch reports next, a
//! state in brief (token and value), a call refused because the lock was
//! lost.

use std::fmt::Debug;
use std::time::Duration;

use lock_core::{FencingToken, HolderWatch, LockError, LockInfo};

/// The next state `watch` reports (`None`: the lock is free); panics if
/// none comes within `within`.
pub async fn next_state(watch: &mut HolderWatch, within: Duration) -> Option<LockInfo> {
    match tokio::time::timeout(within, watch.changed()).await {
        Ok(state) => state,
        Err(_) => panic!(
            "the watch of {} reported nothing within {within:?}",
            watch.key()
        ),
    }
}

/// The next `n` states `watch` reports, in order, each within
/// `each_within` of the one before (see [`next_state`]).
pub async fn next_states(
    watch: &mut HolderWatch,
    n: usize,
    each_within: Duration,
) -> Vec<Option<LockInfo>> {
    let mut states = Vec::with_capacity(n);
    while states.len() < n {
        states.push(next_state(watch, each_within).await);
    }
    states
}

/// Token and value of a state, `None` for a free lock: what most
/// assertions on a state compare.
pub fn brief(state: Option<LockInfo>) -> Option<(FencingToken, String)> {
    state.map(|info| (info.token, info.value))
}

/// Panics unless `result` is [`LockError::Lost`]: a call on a guard whose
/// lock is no longer its own.
#[track_caller]
pub fn assert_lost<T: Debug>(result: Result<T, LockError>) {
    assert!(
        matches!(result, Err(LockError::Lost { .. })),
        "expected Lost, got {result:?}"
    );
}
