//! A release that races a renewal already on its way. `release()` stops
//! scheduling renewals, but one the keeper has sent may still be in
//! flight; if the release deletes the lock first, that renewal finds the
//! lock gone. That is the release's own doing, not a loss: the release
//! must report success (the store said the lock was ours), and no loss
//! may be signalled. Seen on Redlock under load, where every lock of a
//! case fell due at the same moment as its release.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    async_trait, loss_channel, AcquireRequest, Acquired, Backend, Capabilities, HeldLock,
    HolderStream, LossReporter,
};
use lock_core::memory::MemoryBackend;
use lock_core::{LockError, LockInfo, LockName, Locker, LockerOptions, LossReason};
use tokio::sync::Notify;

/// The lease: renewals fall due every 100 ms.
const TTL: Duration = Duration::from_millis(300);

/// The order of one race: the renewal starts and waits; the release
/// deletes the lock, lets the renewal find it gone, and answers only once
/// that renewal has reported the lock lost.
#[derive(Debug, Default)]
struct Race {
    renewal_started: Notify,
    deleted: Notify,
    renewal_answered: Notify,
}

/// The memory store, with renewals held back by [`Race`].
#[derive(Debug)]
struct RacingRenewals {
    store: MemoryBackend,
    race: Arc<Race>,
}

#[derive(Debug)]
struct RacingHeld {
    inner: Box<dyn HeldLock>,
    race: Arc<Race>,
    reporter: LossReporter,
}

#[async_trait]
impl HeldLock for RacingHeld {
    async fn renew(&self, _ttl: Duration) -> Result<(), LockError> {
        self.race.renewal_started.notify_one();
        self.race.deleted.notified().await;
        // The store found the lock gone: a renewal refused, as a backend
        // that reports by itself would also tell its reporter.
        self.reporter.report(LossReason::RenewalRefused);
        self.race.renewal_answered.notify_one();
        Err(LockError::lost("k", LossReason::RenewalRefused))
    }

    async fn release(&self) -> Result<(), LockError> {
        let released = self.inner.release().await;
        self.race.deleted.notify_one();
        self.race.renewal_answered.notified().await;
        released
    }

    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        self.inner.set_value(value).await
    }
}

#[async_trait]
impl Backend for RacingRenewals {
    fn name(&self) -> &'static str {
        "racing-renewals"
    }

    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        let (unheard, _unread) = loss_channel();
        let inner_request = AcquireRequest {
            name: request.name.clone(),
            owner: request.owner.clone(),
            ttl: request.ttl,
            wait: request.wait,
            value: request.value.clone(),
            kind: request.kind,
            taking: request.taking,
            loss: unheard,
        };
        let race = Arc::clone(&self.race);
        let reporter = request.loss.clone();
        Ok(self
            .store
            .acquire(&inner_request)
            .await?
            .map(|acquired| Acquired {
                held: Box::new(RacingHeld {
                    inner: acquired.held,
                    race,
                    reporter,
                }),
                ..acquired
            }))
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        self.store.inspect(name).await
    }

    fn watch(&self, name: &LockName) -> HolderStream {
        self.store.watch(name)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_racing_its_own_renewal_succeeds_and_signals_no_loss() {
    let race = Arc::new(Race::default());
    let store = MemoryBackend::named("release-beside-renewal");
    let backend = RacingRenewals {
        store,
        race: Arc::clone(&race),
    };
    let options = LockerOptions {
        ttl: TTL,
        ..Default::default()
    };
    let locker = Locker::new(Arc::new(backend), options);
    let guard = locker.lock("k").await.unwrap();
    let signal = guard.loss_signal();
    tokio::time::timeout(Duration::from_secs(5), race.renewal_started.notified())
        .await
        .expect("no renewal was sent");

    let released = guard.release().await;
    assert!(released.is_ok(), "the release said {released:?}");
    assert_eq!(signal.loss_reason(), None, "a loss was signalled");
    assert!(locker.inspect("k").await.unwrap().is_none());
}
