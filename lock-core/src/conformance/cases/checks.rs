//! Steps several cases take alike: a call that must still be waiting, a
//! call that must time out, spawned tasks joined, a number that must keep
//! rising, and the two lockers of a case about per-lock expiry.

use std::fmt::Debug;
use std::future::Future;

use tokio::task::JoinHandle;

use super::*;

/// Checks that `call` has not returned within `limit`, and drops it (a
/// call cancelled while it waits). `returned` says what returning would
/// mean.
pub(super) async fn assert_still_waiting<F: Future>(call: F, limit: Duration, returned: &str) {
    assert!(
        tokio::time::timeout(limit, call).await.is_err(),
        "{returned}"
    );
}

/// Checks that `result` is a [`LockError::Timeout`].
pub(super) fn assert_timed_out<T: Debug>(result: &Result<T, LockError>) {
    assert!(
        matches!(result, Err(LockError::Timeout { .. })),
        "{result:?}"
    );
}

/// Awaits every task in turn, re-raising the first panic or error.
pub(super) async fn join_all(
    tasks: Vec<JoinHandle<Result<(), LockError>>>,
) -> Result<(), LockError> {
    for task in tasks {
        join(task).await?;
    }
    Ok(())
}

/// Checks that `next` (a token or a term: `what`) is above the last one
/// recorded in `last`, then records it.
pub(super) fn assert_rises(last: &Mutex<u64>, next: u64, what: &str) {
    let mut last = last.lock().unwrap();
    assert!(next > *last, "{what} {next} after {}", *last);
    *last = next;
}

/// The settings of `case` with [`SHORT_TTL`] and two lockers on them (see
/// [`two_lockers`]); `None` where a lock does not expire on its own (the
/// case is then not applicable: [`why::NO_LOCK_EXPIRES_ALONE`]).
pub(super) async fn two_expiring_lockers(
    factory: &dyn LockerFactory,
    case: &str,
) -> Result<Option<(CaseSettings, Locker, Locker)>, LockError> {
    let (settings, a, b) = two_lockers(factory, case, SHORT_TTL).await?;
    Ok(a.capabilities().per_lock_expiry.then_some((settings, a, b)))
}
