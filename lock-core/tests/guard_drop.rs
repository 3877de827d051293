//! Dropping guards must never block or panic, and must free the lock.

use std::time::Duration;

use lock_core::{LockGuard, LockOptions, Locker};
use tokio::runtime::Runtime;

/// A memory locker on store `store`, a runtime, and the guard of `k` taken
/// on that runtime.
fn held_on_a_runtime(store: &str) -> (Locker, Runtime, LockGuard) {
    let locker = Locker::memory(store).unwrap();
    let runtime = Runtime::new().unwrap();
    let guard = runtime.block_on(locker.lock("k")).unwrap();
    (locker, runtime, guard)
}

#[test]
fn a_guard_dropped_after_its_runtime_is_gone_frees_the_lock_without_panicking() {
    let (locker, runtime, guard) = held_on_a_runtime("guard-drop-no-runtime");
    drop(runtime);
    drop(guard);
    let runtime = Runtime::new().unwrap();
    let again = runtime.block_on(locker.try_lock("k")).unwrap();
    assert!(again.is_some(), "the dropped guard's lock is still held");
}

#[test]
fn a_guard_dropped_outside_any_runtime_context_does_not_panic() {
    let (locker, runtime, guard) = held_on_a_runtime("guard-drop-outside");
    // The runtime still exists but this thread is not inside it.
    drop(guard);
    let freed = runtime.block_on(async {
        locker
            .lock_with("k", LockOptions::new().wait(Duration::from_secs(1)))
            .await
    });
    assert!(freed.is_ok());
}

#[tokio::test]
async fn a_cancelled_release_still_releases() {
    let locker = Locker::memory("guard-cancelled-release").unwrap();
    let guard = locker.lock("k").await.unwrap();
    // Poll release once at most, then drop it mid-way.
    let _ = tokio::time::timeout(Duration::ZERO, guard.release()).await;
    let next = locker
        .lock_with("k", LockOptions::new().wait(Duration::from_secs(1)))
        .await;
    assert!(next.is_ok());
}

#[tokio::test]
async fn a_leaked_guard_keeps_the_lock_until_it_expires() {
    let locker = Locker::memory("guard-leak")
        .unwrap()
        .with_options(lock_core::LockerOptions {
            ttl: Duration::from_millis(300),
            ..Default::default()
        });
    locker.lock("k").await.unwrap().leak();
    assert!(
        locker.try_lock("k").await.unwrap().is_none(),
        "leak released the lock"
    );
    let later = locker
        .lock_with("k", LockOptions::new().wait(Duration::from_secs(2)))
        .await;
    assert!(later.is_ok(), "the leaked lock never expired");
}
