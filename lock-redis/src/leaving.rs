//! Clean-ups of abandoned acquisitions, and the attempts that must wait
//! for them.
//!
//! An acquisition that ends without its hold (deadline, error, dropped
//! call) leaves its place in line, and gives back a hold its unanswered
//! attempt may have taken, in the background ([`LeaveOnDrop`]). Until that
//! clean-up's first call has been answered, its line entry may still hold
//! others back (a waiting writer keeps readers out), so the next attempts
//! of the same backend on the same object wait for it ([`Leaving::settled`],
//! bounded): an application that gives up a write and then asks for a read
//! is not refused by its own leftover. Attempts on objects without a
//! clean-up under way pay one map look-up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::backend::{spawn_detached, HoldKind};
use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::backend::{leave, Inner};
use crate::keys::LockKeys;

/// The clean-ups under way on one backend, counted per object (the Redis
/// key of a lock, or of a semaphore's permits).
#[derive(Debug, Default)]
pub(crate) struct Leaving {
    pending: Mutex<HashMap<String, watch::Sender<usize>>>,
}

impl Leaving {
    fn pending(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<usize>>> {
        // Every update is a single step; a poisoned map is still consistent.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a clean-up of `object` as under way until the returned
    /// [`Pending`] is dropped.
    pub(crate) fn start(self: &Arc<Self>, object: &str) -> Pending {
        self.pending()
            .entry(object.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .send_modify(|n| *n += 1);
        Pending {
            leaving: Arc::clone(self),
            object: object.to_owned(),
        }
    }

    /// Waits (at most `bound`) until no clean-up of `object` is under way.
    pub(crate) async fn settled(&self, object: &str, bound: Duration) {
        let Some(mut count) = self.pending().get(object).map(watch::Sender::subscribe) else {
            return;
        };
        let _ = tokio::time::timeout(bound, count.wait_for(|n| *n == 0)).await;
    }
}

/// One clean-up under way; see [`Leaving::start`].
#[derive(Debug)]
pub(crate) struct Pending {
    leaving: Arc<Leaving>,
    object: String,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut pending = self.leaving.pending();
        if let Some(count) = pending.get(&self.object) {
            count.send_modify(|n| *n = n.saturating_sub(1));
            if *count.borrow() == 0 {
                pending.remove(&self.object);
            }
        }
    }
}

/// The Redis key a clean-up of a `kind` hold of `keys` is counted under.
pub(crate) fn object_of(keys: &LockKeys, kind: HoldKind) -> &str {
    match kind {
        HoldKind::Permit { .. } => keys.permits(),
        _ => keys.lock(),
    }
}

/// Leaves the line (and gives back a hold taken meanwhile) in the
/// background when dropped, unless [disarmed](Self::disarm); the clean-up
/// counts as under way from the drop on.
pub(crate) struct LeaveOnDrop {
    work: Option<Work>,
    fallback: Option<Handle>,
}

struct Work {
    inner: Arc<Inner>,
    keys: LockKeys,
    owner: String,
    ttl: Duration,
    kind: HoldKind,
}

impl LeaveOnDrop {
    /// Arms the clean-up of `owner`'s `kind` acquisition of `keys`.
    pub(crate) fn new(
        inner: &Arc<Inner>,
        keys: &LockKeys,
        owner: &str,
        ttl: Duration,
        kind: HoldKind,
    ) -> Self {
        Self {
            work: Some(Work {
                inner: Arc::clone(inner),
                keys: keys.clone(),
                owner: owner.to_owned(),
                ttl,
                kind,
            }),
            fallback: Handle::try_current().ok(),
        }
    }

    /// Cancels the clean-up: the acquisition holds.
    pub(crate) fn disarm(mut self) {
        self.work = None;
    }
}

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            let pending = work.inner.leaving.start(object_of(&work.keys, work.kind));
            spawn_detached(
                self.fallback.as_ref(),
                leave(
                    work.inner, work.keys, work.owner, work.ttl, work.kind, pending,
                ),
            );
        }
    }
}

impl std::fmt::Debug for LeaveOnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaveOnDrop")
            .field("armed", &self.work.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn attempts_wait_for_the_clean_ups_of_their_object_only() {
        let leaving = Arc::new(Leaving::default());
        let pending = leaving.start("a");
        let bound = Duration::from_secs(5);
        // Another object does not wait.
        tokio::time::timeout(Duration::from_millis(100), leaving.settled("b", bound))
            .await
            .expect("b has no clean-up");
        let waiting = tokio::spawn({
            let leaving = Arc::clone(&leaving);
            async move { leaving.settled("a", bound).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "settled before the clean-up ended");
        drop(pending);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("settled once the clean-up ended")
            .unwrap();
        assert!(leaving.pending().is_empty());
    }
}
