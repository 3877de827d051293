//! A lease's renewal task is spawned when the acquisition starts, before
//! the lock is taken (see `early_renewal`): a lock taken only after a wait
//! of several ttls must still be renewed from then on.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Locker, LockerOptions, MemoryBackend};

const TTL: Duration = Duration::from_millis(300);

fn locker(store: &str) -> Locker {
    Locker::new(
        Arc::new(MemoryBackend::named(store)),
        LockerOptions {
            ttl: TTL,
            ..Default::default()
        },
    )
}

#[tokio::test]
async fn a_lock_taken_after_waiting_several_ttls_is_renewed() {
    let store = "renewal-start-after-wait";
    let (holder, waiter, other) = (locker(store), locker(store), locker(store));
    let first = holder.lock("k").await.unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("k").await.unwrap() });
    tokio::time::sleep(TTL * 4).await;
    assert!(first.is_held(), "the holder's lease was renewed");
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter got the lock")
        .unwrap();
    tokio::time::sleep(TTL * 4).await;
    assert!(second.is_held(), "the waiter's lease was renewed");
    assert!(
        other.try_lock("k").await.unwrap().is_none(),
        "the waiter's lock expired in the store"
    );
    second.release().await.unwrap();
}

#[tokio::test]
async fn a_lock_held_without_auto_renewal_is_reported_lost_at_its_end() {
    let store = "renewal-start-no-auto-renew";
    let locker = locker(store);
    let guard = locker
        .lock_with("k", lock_core::LockOptions::new().auto_renew(false))
        .await
        .unwrap();
    let lost = tokio::time::timeout(TTL * 3, guard.lost()).await;
    assert!(lost.is_ok(), "the end of the lease was reported");
}
