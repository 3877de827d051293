//! Leases are kept (renewed every ttl/3, or reported lost at the end of
//! their validity) by one task per locker: a lock taken after a long wait,
//! many locks at once, locks released while others are kept, and locks on
//! two runtimes, one of which shuts down.

use std::sync::Arc;
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::{LockGuard, Locker, LockerOptions};
use tokio::runtime::Runtime;

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

/// A new runtime, and `key` taken by `locks` on it.
fn taken_on_a_runtime_of_its_own(locks: &Locker, key: &str) -> (Runtime, LockGuard) {
    let runtime = Runtime::new().unwrap();
    let guard = runtime.block_on(locks.lock(key)).unwrap();
    (runtime, guard)
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

/// A process frozen past its lease wakes before its timers run: the guard
/// must not say "held" then, as another client may hold the lock by now.
#[tokio::test]
async fn a_guard_frozen_past_its_lease_says_lost_before_any_timer_runs() {
    let store = "renewal-frozen-past-lease";
    let locker = locker(store);
    let guard = locker.lock("k").await.unwrap();
    assert!(guard.is_held());
    // Blocks the only runtime thread: neither the renewal nor the
    // validity timer can run, as in a process stopped with SIGSTOP.
    std::thread::sleep(TTL * 2);
    assert!(
        !guard.is_held(),
        "a guard whose validity window closed still says held"
    );
    let reason = tokio::time::timeout(Duration::ZERO, guard.lost()).await;
    assert_eq!(reason.ok(), Some(lock_core::LossReason::ValidityExpired));
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

/// Whether `guard`'s lock is still taken in the store: another locker
/// cannot take it.
async fn still_taken(store: &str, key: &str) -> bool {
    locker(store).try_lock(key).await.unwrap().is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_locks_are_renewed_while_others_come_and_go() {
    let store = "keeping-many";
    let locks = locker(store);
    let mut kept = Vec::new();
    for i in 0..50 {
        kept.push(locks.lock(&format!("kept-{i}")).await.unwrap());
    }
    // Locks taken and released meanwhile leave nothing that stops the
    // others' renewals.
    let churn = tokio::spawn({
        let locks = locks.clone();
        async move {
            let deadline = tokio::time::Instant::now() + TTL * 5;
            let mut n = 0u64;
            while tokio::time::Instant::now() < deadline {
                let guard = locks.lock(&format!("churn-{}", n % 7)).await.unwrap();
                n += 1;
                guard.release().await.unwrap();
                tokio::task::yield_now().await;
            }
            n
        }
    });
    tokio::time::sleep(TTL * 5).await;
    assert!(churn.await.unwrap() > 0);
    for (i, guard) in kept.iter().enumerate() {
        assert!(guard.is_held(), "lock {i} was not renewed");
        assert!(
            still_taken(store, &format!("kept-{i}")).await,
            "lock {i} expired"
        );
    }
    for guard in kept {
        guard.release().await.unwrap();
    }
}

#[test]
fn locks_on_a_runtime_that_lives_on_are_renewed_when_another_shuts_down() {
    let store = "keeping-two-runtimes";
    let locks = locker(store);
    // The first lock starts the keeper on the first runtime...
    let (first, early) = taken_on_a_runtime_of_its_own(&locks, "early");
    // ...which keeps the second runtime's lock too.
    let (second, later) = taken_on_a_runtime_of_its_own(&locks, "later");
    drop(first);
    second.block_on(async {
        tokio::time::sleep(TTL * 5).await;
        assert!(later.is_held(), "the lock lost its keeper");
        assert!(
            still_taken(store, "later").await,
            "the lock expired in the store"
        );
    });
    // The first runtime's lock is kept from the second one too.
    assert!(early.is_held(), "the lock of the runtime that shut down");
    second.block_on(async {
        assert!(still_taken(store, "early").await);
        later.release().await.unwrap();
        early.release().await.unwrap();
    });
}

#[test]
fn a_lock_whose_runtime_is_gone_is_reported_lost() {
    let store = "keeping-runtime-gone";
    let locks = locker(store);
    let (runtime, guard) = taken_on_a_runtime_of_its_own(&locks, "k");
    let signal = guard.loss_signal();
    drop(runtime);
    assert_eq!(
        signal.loss_reason(),
        Some(lock_core::LossReason::ValidityExpired),
        "nothing renews the lock any more"
    );
    drop(guard);
}
