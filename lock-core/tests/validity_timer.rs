//! lock-core's own validity timer, with a store that never reports a loss
//! by itself: renewals that never get an answer (a store gone silent). The
//! memory store tells a holder of its loss when another client takes the
//! lock over, which would hide the timer; here the loss must already be
//! known, as `ValidityExpired`, when the lock is taken over.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    async_trait, loss_channel, AcquireRequest, Acquired, Backend, Capabilities, HeldLock,
    HolderStream,
};
use lock_core::memory::MemoryBackend;
use lock_core::{LockError, LockInfo, LockName, Locker, LockerOptions, LossReason, LossSignal};

/// Long enough that the drift margin (1 % + 2 ms = 32 ms) dwarfs a busy
/// machine's timer lateness.
const TTL: Duration = Duration::from_secs(3);

/// The memory store, except that renewals never answer and losses are
/// never reported (the store is told to report them to a signal nobody
/// reads).
#[derive(Debug)]
struct SilentRenewals(MemoryBackend);

#[derive(Debug)]
struct SilentHeld {
    inner: Box<dyn HeldLock>,
    /// Keeps the store's reporter attached to something.
    _unread: LossSignal,
}

#[async_trait]
impl HeldLock for SilentHeld {
    async fn renew(&self, _ttl: Duration) -> Result<(), LockError> {
        std::future::pending().await
    }

    async fn release(&self) -> Result<(), LockError> {
        self.inner.release().await
    }

    async fn set_value(&self, value: &str) -> Result<(), LockError> {
        self.inner.set_value(value).await
    }
}

#[async_trait]
impl Backend for SilentRenewals {
    fn name(&self) -> &'static str {
        "silent-renewals"
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<Option<Acquired>, LockError> {
        let (unheard, unread) = loss_channel();
        let request = AcquireRequest {
            name: request.name.clone(),
            owner: request.owner.clone(),
            ttl: request.ttl,
            wait: request.wait,
            value: request.value.clone(),
            kind: request.kind,
            taking: request.taking,
            loss: unheard,
        };
        Ok(self.0.acquire(&request).await?.map(|acquired| Acquired {
            held: Box::new(SilentHeld {
                inner: acquired.held,
                _unread: unread,
            }),
            ..acquired
        }))
    }

    async fn inspect(&self, name: &LockName) -> Result<Option<LockInfo>, LockError> {
        self.0.inspect(name).await
    }

    fn watch(&self, name: &LockName) -> HolderStream {
        self.0.watch(name)
    }
}

fn options() -> LockerOptions {
    LockerOptions {
        ttl: TTL,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_validity_timer_signals_the_loss_before_anyone_takes_the_lock() {
    let store = "validity-timer-silent-store";
    let silent = Locker::new(
        Arc::new(SilentRenewals(MemoryBackend::named(store))),
        options(),
    );
    let other = Locker::new(Arc::new(MemoryBackend::named(store)), options());
    let guard = silent.lock("k").await.unwrap();
    let signal = guard.loss_signal();
    // Take the lock over the moment the store lets anyone have it.
    let taken = loop {
        if let Some(taken) = other.try_lock("k").await.unwrap() {
            break taken;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert_eq!(
        signal.loss_reason(),
        Some(LossReason::ValidityExpired),
        "the holder was not told before the takeover"
    );
    taken.release().await.unwrap();
}
