//! The clean-ups of abandoned acquisitions under way, and the attempts
//! that must wait for them.
//!
//! An acquisition that ends without its hold (deadline, error, dropped
//! call) leaves its place in line in the background. Until that clean-up
//! has been answered, its entry may still hold others back (a waiting
//! writer keeps readers out), so a store's next attempts on the same
//! object wait for it ([`Leaving::settled`], bounded): an application that
//! gives up a write and then asks for a read is not refused by its own
//! leftover. Attempts on objects without a clean-up under way pay one map
//! look-up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

/// The clean-ups under way on one backend, counted per object (whatever
/// string the store names a lock's or a semaphore's line by).
#[derive(Debug, Default)]
pub struct Leaving {
    pending: Mutex<HashMap<String, watch::Sender<usize>>>,
}

impl Leaving {
    fn pending(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<usize>>> {
        // Every update is a single step; a poisoned map is still consistent.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a clean-up of `object` as under way until the returned
    /// [`Pending`] is dropped.
    pub fn start(self: &Arc<Self>, object: &str) -> Pending {
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
    pub async fn settled(&self, object: &str, bound: Duration) {
        let Some(mut count) = self.pending().get(object).map(watch::Sender::subscribe) else {
            return;
        };
        let _ = tokio::time::timeout(bound, count.wait_for(|n| *n == 0)).await;
    }
}

/// One clean-up under way, until dropped; see [`Leaving::start`].
#[derive(Debug)]
pub struct Pending {
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
