//! The cases. Each takes a [`LockerFactory`] and checks one behaviour the
//! user relies on; assertion failures panic with what went wrong.

mod checks;
mod election;
mod exclusion;
mod keys;
mod lifecycle;
mod loss;
mod rwlock;
mod semaphore;
mod watch;

use checks::*;
pub use election::*;
pub use exclusion::*;
pub use keys::*;
pub use lifecycle::*;
pub use loss::*;
pub use rwlock::*;
pub use semaphore::*;
pub use watch::*;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::factory::{CaseSettings, LockerFactory};
use super::runner::Outcome;
use super::CaseResult;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::key::{Namespace, MAX_KEY_LEN};
use crate::locker::Locker;
use crate::options::LockOptions;

/// Why a case does not apply, in a user's words: what the store does
/// instead of what the case needs.
mod why {
    pub(super) const NO_READ_WRITE_LOCKS: &str =
        "the store has no read-write locks: rwlock() returns NotSupported";
    pub(super) const NO_SEMAPHORES: &str =
        "the store has no semaphores: semaphore() returns NotSupported";
    pub(super) const NO_STORED_LIMIT: &str =
        "the store keeps no limit with a semaphore (its clients agree on one): \
         a request under another limit cannot be told apart";
    pub(super) const NO_SHARED_HOLDS: &str =
        "the store has neither read-write locks nor semaphores";
    pub(super) const NO_LOCK_EXPIRES_ALONE: &str =
        "a lock here lives as long as its locker (its session, lease or open file), \
         so a lock its live locker stops renewing is never freed on its own";
    pub(super) const NO_ABANDONED_HOLD: &str =
        "a lock here lives as long as its locker, and a live deployment cannot be cut \
         off to abandon one (the test suite does it through a fault proxy)";
    pub(super) const NO_OUTAGE: &str =
        "needs to cut this client off the store and back, which only the test suite can \
         do (through a fault proxy), not a live deployment";
    pub(super) const NO_TAKEOVER: &str =
        "the store cannot remove another owner's lock (no force_release), \
         and its locks do not expire on their own";
    pub(super) const NO_FORCE_RELEASE: &str =
        "the store cannot remove another owner's lock (no force_release)";
    pub(super) const NO_PURGE: &str = "the store cannot remove a whole namespace";
    pub(super) const NO_NAMESPACES: &str =
        "keys are laid out as another client family's (option `layout`): they are exactly \
         the names that family uses, so the locker's namespace is not part of them";
}

/// The ttl of most cases: long enough that expiry cannot explain a
/// hand-off the case expects from a release.
const TTL: Duration = Duration::from_secs(3);

/// The ttl of cases that wait for expiry or renewal.
const SHORT_TTL: Duration = Duration::from_secs(1);

/// Slack for scheduling and store latency on a busy CI machine.
const SLACK: Duration = Duration::from_secs(2);

/// A fresh namespace named after `case`, and `ttl`.
fn settings(case: &str, ttl: Duration) -> CaseSettings {
    let short: String = case
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(24)
        .collect();
    let unique = &uuid::Uuid::new_v4().simple().to_string()[..12];
    CaseSettings {
        namespace: Namespace::new(&format!("c-{short}-{unique}")).expect("valid namespace"),
        ttl,
    }
}

fn wait(d: Duration) -> LockOptions {
    LockOptions::new().wait(d)
}

/// Awaits a spawned task, re-raising its panic in the case.
async fn join<T>(task: tokio::task::JoinHandle<T>) -> T {
    match task.await {
        Ok(value) => value,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => panic!("task failed: {error}"),
    }
}

/// Lockers in the same namespace, each with its own connection.
async fn open_many(
    factory: &dyn LockerFactory,
    settings: &CaseSettings,
    count: usize,
) -> Result<Vec<Locker>, LockError> {
    let mut lockers = Vec::with_capacity(count);
    for _ in 0..count {
        lockers.push(factory.open(settings).await?);
    }
    Ok(lockers)
}

/// The settings of `case` (see [`settings`]) and two lockers on them, each
/// with its own connection.
async fn two_lockers(
    factory: &dyn LockerFactory,
    case: &str,
    ttl: Duration,
) -> Result<(CaseSettings, Locker, Locker), LockError> {
    let settings = settings(case, ttl);
    let a = factory.open(&settings).await?;
    let b = factory.open(&settings).await?;
    Ok((settings, a, b))
}

/// The end of a case whose holder must have kept its lock through what the
/// case did: asserts that `guard` still holds it, releases it, and passes.
async fn passes_if_still_held(guard: LockGuard) -> CaseResult {
    assert!(
        guard.is_held(),
        "the holder of {} lost it: {:?}",
        guard.key(),
        guard.loss_signal().loss_reason()
    );
    guard.release().await?;
    Ok(Outcome::Passed)
}
