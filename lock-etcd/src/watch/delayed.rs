//! Watches queued for the server but not yet due.

use std::collections::HashMap;

use lock_core::backend::DueQueue;
use tokio::time::Instant;

use super::target::Watch;

/// Delayed watches in the order they become due. Dropped watches leave a
/// stale id in `due`, skipped when it comes up or reaches the front.
#[derive(Default)]
pub(super) struct Delayed {
    due: DueQueue<i64>,
    watches: HashMap<i64, Watch>,
}

impl Delayed {
    /// Queues a watch due at `at`. True if the queue was empty, i.e. the
    /// hub's task has no timer set and must be woken (a queue holding only
    /// dropped watches is emptied by [`next_due`](Self::next_due) before
    /// the task waits without a timer).
    pub(super) fn push(&mut self, at: Instant, id: i64, watch: Watch) -> bool {
        self.watches.insert(id, watch);
        self.due.push(at, id)
    }

    /// Forgets a watch that was never sent; false if it is not here (sent
    /// already, or fired).
    pub(super) fn remove(&mut self, id: i64) -> bool {
        self.watches.remove(&id).is_some()
    }

    /// When the next watch still wanted is due (see [`DueQueue::next_due`]).
    pub(super) fn next_due(&mut self) -> Option<Instant> {
        let watches = &self.watches;
        self.due.next_due(|id| watches.contains_key(id))
    }

    /// Takes the watches due by `now` that are still wanted.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<(i64, Watch)> {
        self.due
            .take_due(now)
            .into_iter()
            .filter_map(|id| self.watches.remove(&id).map(|watch| (id, watch)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn watch() -> Watch {
        Watch {
            key: b"k".to_vec(),
            next_revision: 1,
            target: super::super::target::Target::Once(Box::new(|_| {})),
        }
    }

    #[test]
    fn due_watches_come_out_in_order_and_dropped_ones_never() {
        let now = Instant::now();
        let mut delayed = Delayed::default();
        assert!(delayed.push(now, 1, watch()));
        assert!(!delayed.push(now + Duration::from_millis(1), 2, watch()));
        assert!(!delayed.push(now + Duration::from_secs(9), 3, watch()));
        assert!(delayed.remove(2));
        assert!(!delayed.remove(2));
        let ready: Vec<i64> = delayed
            .take_due(now + Duration::from_secs(1))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ready, [1]);
        assert_eq!(delayed.next_due(), Some(now + Duration::from_secs(9)));
        assert!(delayed.remove(3));
        assert!(delayed.take_due(now + Duration::from_secs(10)).is_empty());
        assert_eq!(delayed.next_due(), None);
    }

    #[test]
    fn dropped_watches_set_no_due_time() {
        let now = Instant::now();
        let mut delayed = Delayed::default();
        for id in 1..=3 {
            assert_eq!(
                delayed.push(now + Duration::from_millis(id as u64), id, watch()),
                id == 1
            );
            assert_eq!(delayed.next_due(), Some(now + Duration::from_millis(1)));
        }
        assert!(delayed.remove(1));
        assert!(delayed.remove(2));
        assert_eq!(delayed.next_due(), Some(now + Duration::from_millis(3)));
        assert!(delayed.remove(3));
        assert_eq!(delayed.next_due(), None);
        // Emptied: the next watch wakes the task again.
        assert!(delayed.push(now, 4, watch()));
    }
}
