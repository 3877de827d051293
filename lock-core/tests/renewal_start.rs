//! A lease's renewal task is spawned when the acquisition starts, before
//! the lock is taken (see `early_renewal`): a lock taken only after a wait
//! of several ttls must still be renewed from then on.

use std::sync::Arc;
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::{Locker, LockerOptions};

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

/// A store whose replies to acquisitions arrive `delay` late: the lock was
/// taken when the inner store says, the caller hears of it later.
#[derive(Debug)]
struct LateReplies {
    inner: MemoryBackend,
    delay: Duration,
}

#[lock_core::backend::async_trait]
impl lock_core::backend::Backend for LateReplies {
    fn name(&self) -> &'static str {
        "late-replies"
    }

    fn capabilities(&self) -> lock_core::backend::Capabilities {
        self.inner.capabilities()
    }

    async fn acquire(
        &self,
        request: &lock_core::backend::AcquireRequest,
    ) -> Result<Option<lock_core::backend::Acquired>, lock_core::LockError> {
        let acquired = self.inner.acquire(request).await?;
        tokio::time::sleep(self.delay).await;
        Ok(acquired)
    }

    async fn inspect(
        &self,
        name: &lock_core::LockName,
    ) -> Result<Option<lock_core::LockInfo>, lock_core::LockError> {
        self.inner.inspect(name).await
    }

    fn watch(&self, name: &lock_core::LockName) -> lock_core::backend::HolderStream {
        self.inner.watch(name)
    }
}

/// A lock whose acquisition reply came after its lease ran out is
/// reported lost before the guard is handed over: the guard never shows
/// as held a lock that another client can already take.
#[tokio::test]
async fn a_lock_heard_of_after_its_lease_ran_out_is_lost_at_once() {
    let store = "renewal-start-late-reply";
    let late = Locker::new(
        Arc::new(LateReplies {
            inner: MemoryBackend::named(store),
            delay: TTL * 2,
        }),
        LockerOptions {
            ttl: TTL,
            ..Default::default()
        },
    );
    let guard = late.lock("k").await.unwrap();
    assert!(!guard.is_held(), "a lock past its lease shows as held");
    assert_eq!(
        guard.loss_signal().loss_reason(),
        Some(lock_core::LossReason::ValidityExpired)
    );
    assert!(
        locker(store).try_lock("k").await.unwrap().is_some(),
        "the store had freed it"
    );
}
