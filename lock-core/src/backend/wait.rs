//! Waiting for a busy lock: per-key wake-ups and the shared retry loop for
//! stores that can only "try" (memory, file, Redis).
//!
//! Stores with a queue (etcd, ZooKeeper) wait on their predecessor instead
//! and do not use [`acquire_with_retries`].

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::watch;

use super::backoff::{Backoff, Delays};
use super::{AcquireRequest, Acquired};
use crate::error::LockError;
use crate::key::LockName;

/// Per-key wake-ups among the waiters of one process.
///
/// A waiter [subscribes](Self::subscribe) *before* its attempt, so a
/// release that happens between a failed attempt and the wait is not
/// missed. Releasers (or a store notification dispatcher) call
/// [`wake`](Self::wake). Entries disappear with their last subscriber.
#[derive(Clone, Default)]
pub struct WakeRegistry {
    keys: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
}

impl WakeRegistry {
    /// A registry with no subscribers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts listening for releases of `key`.
    pub fn subscribe(&self, key: &str) -> WakeSubscription {
        let mut keys = lock(&self.keys);
        let sender = keys
            .entry(key.to_owned())
            .or_insert_with(|| watch::channel(0).0);
        WakeSubscription {
            receiver: sender.subscribe(),
            registry: self.clone(),
            key: key.to_owned(),
            guard: None,
        }
    }

    /// Wakes every current subscriber of `key`. Returns how many there were.
    pub fn wake(&self, key: &str) -> usize {
        let keys = lock(&self.keys);
        match keys.get(key) {
            Some(sender) => {
                sender.send_modify(|generation| *generation = generation.wrapping_add(1));
                sender.receiver_count()
            }
            None => 0,
        }
    }

    /// Whether anyone in this process waits on `key`.
    pub fn has_subscribers(&self, key: &str) -> bool {
        lock(&self.keys).contains_key(key)
    }

    /// How many keys have subscribers.
    pub fn subscribed_keys(&self) -> usize {
        lock(&self.keys).len()
    }
}

impl fmt::Debug for WakeRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WakeRegistry")
            .field("keys", &self.subscribed_keys())
            .finish()
    }
}

/// Interest in the releases of one key; see [`WakeRegistry::subscribe`].
pub struct WakeSubscription {
    receiver: watch::Receiver<u64>,
    registry: WakeRegistry,
    key: String,
    /// Dropped right after the subscription leaves the registry.
    guard: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl WakeSubscription {
    /// Resolves at the first wake-up after the subscription was made (or
    /// after the previous call returned).
    pub async fn woken(&mut self) {
        // The sender lives in the registry for as long as this receiver
        // exists, so `changed` cannot fail; treat failure as a wake-up.
        let _ = self.receiver.changed().await;
    }

    /// Keeps `guard` alive exactly as long as this subscription. A store
    /// that listens for releases per key (a pub/sub channel) attaches its
    /// own interest here, so it stops listening when the last local waiter
    /// is gone.
    pub fn with_guard(mut self, guard: impl Send + Sync + 'static) -> Self {
        self.guard = Some(Box::new(guard));
        self
    }
}

impl Drop for WakeSubscription {
    fn drop(&mut self) {
        let mut keys = lock(&self.registry.keys);
        // Count before our receiver is gone: the last subscriber removes the entry.
        if keys
            .get(&self.key)
            .is_some_and(|sender| sender.receiver_count() <= 1)
        {
            keys.remove(&self.key);
        }
    }
}

impl fmt::Debug for WakeSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WakeSubscription")
            .field("key", &self.key)
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the map inconsistent.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The outcome of one attempt by a try-style store.
#[derive(Debug)]
pub enum Attempt {
    /// The lock is ours.
    Acquired(Acquired),
    /// Someone else holds it; `retry_after` is the holder's remaining lease
    /// where the store knows it (a free-on-expiry store publishes nothing
    /// when a lease runs out, so waiters must retry by then).
    Held {
        /// Remaining lease of the holder, if known.
        retry_after: Option<Duration>,
    },
}

/// A store that takes locks by single attempts and can announce releases.
#[async_trait]
pub trait TryAcquire: Send + Sync {
    /// Starts listening for releases of `name`. Called once, before the
    /// first attempt of an acquire that may wait; the subscription lives
    /// until the acquire returns.
    async fn watch_releases(&self, name: &LockName) -> Result<WakeSubscription, LockError>;

    /// One attempt to take the lock. Must be cancel-safe.
    async fn try_acquire_once(&self, request: &AcquireRequest) -> Result<Attempt, LockError>;

    /// How often to retry when no wake-up comes, as a safety net for lost
    /// notifications (e.g. during a reconnect) or for stores that cannot
    /// notify other processes. `Backoff::stop()` means: rely on wake-ups
    /// and the holder's remaining lease only.
    fn poll_policy(&self) -> Backoff;
}

/// The shared acquire loop for [`TryAcquire`] stores: subscribe, attempt,
/// then sleep until a release wake-up, the holder's lease end or the next
/// poll, whichever comes first. Returns `Ok(None)` for a failed
/// [`WaitMode::Try`](super::WaitMode::Try) attempt or at the deadline;
/// store errors end the wait at once.
pub async fn acquire_with_retries<S>(
    store: &S,
    request: &AcquireRequest,
) -> Result<Option<Acquired>, LockError>
where
    S: TryAcquire + ?Sized,
{
    let mut polls: Delays = store.poll_policy().delays();
    // One subscription for the whole wait: it records every wake-up since
    // it was made, so a release between a failed attempt and the sleep is
    // not missed, and the store is not asked to listen anew per attempt.
    let mut subscription = if request.wait.may_wait() {
        Some(store.watch_releases(&request.name).await?)
    } else {
        None
    };
    loop {
        let retry_after = match store.try_acquire_once(request).await? {
            Attempt::Acquired(acquired) => return Ok(Some(acquired)),
            Attempt::Held { retry_after } => retry_after,
        };
        let Some(subscription) = subscription.as_mut() else {
            return Ok(None);
        };
        let pause = [retry_after, polls.next()].into_iter().flatten().min();
        let wake_at = match (pause, request.wait.deadline()) {
            (Some(pause), Some(deadline)) => Some((Instant::now() + pause).min(deadline)),
            (Some(pause), None) => Some(Instant::now() + pause),
            (None, deadline) => deadline,
        };
        match wake_at {
            Some(at) => {
                tokio::select! {
                    () = subscription.woken() => {}
                    () = tokio::time::sleep_until(at.into()) => {}
                }
            }
            None => subscription.woken().await,
        }
        if request
            .wait
            .deadline()
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            // One last attempt at the deadline, so a lock freed exactly then is taken.
            return match store.try_acquire_once(request).await? {
                Attempt::Acquired(acquired) => Ok(Some(acquired)),
                Attempt::Held { .. } => Ok(None),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_after_subscribing_is_not_missed() {
        let registry = WakeRegistry::new();
        let mut sub = registry.subscribe("k");
        assert_eq!(registry.wake("k"), 1);
        tokio::time::timeout(Duration::from_secs(1), sub.woken())
            .await
            .expect("woken");
    }

    #[tokio::test]
    async fn wakes_only_the_named_key() {
        let registry = WakeRegistry::new();
        let mut other = registry.subscribe("other");
        registry.wake("k");
        let waited = tokio::time::timeout(Duration::from_millis(30), other.woken()).await;
        assert!(waited.is_err());
    }

    #[test]
    fn an_attached_guard_lives_as_long_as_the_subscription() {
        struct Flag(Arc<Mutex<bool>>);
        impl Drop for Flag {
            fn drop(&mut self) {
                *self.0.lock().unwrap() = true;
            }
        }
        let registry = WakeRegistry::new();
        let dropped = Arc::new(Mutex::new(false));
        let sub = registry.subscribe("k").with_guard(Flag(dropped.clone()));
        assert!(!*dropped.lock().unwrap());
        drop(sub);
        assert!(*dropped.lock().unwrap());
        assert!(!registry.has_subscribers("k"));
    }

    #[test]
    fn entries_go_with_their_last_subscriber() {
        let registry = WakeRegistry::new();
        let a = registry.subscribe("k");
        let b = registry.subscribe("k");
        drop(a);
        assert!(registry.has_subscribers("k"));
        drop(b);
        assert!(!registry.has_subscribers("k"));
        assert_eq!(registry.wake("k"), 0);
    }
}
