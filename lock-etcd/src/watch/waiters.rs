//! Waiting for a key's deletion on a watch that outlives the wait.
//!
//! etcd turns a watch "from now" into one from the revision it read as the
//! request came in, + 1, and only then takes the store's watch lock. If a
//! write commits in between, the new watch starts at or below the current
//! revision and lands in the "unsynced" group, which the server scans only
//! every 100 ms. On a busy lock writes commit all the time: measured here
//! with two lockers alternating on one key, a few hand-offs in a hundred
//! stalled for 20–90 ms that way, which more than doubled the average.
//!
//! So waiters do not create a watch per wait. The first waiter on a key
//! opens a watch on it (deletions only); later waiters on the same key
//! join it, and it stays open for [`LINGER`] after its last waiter left.
//! Entry names are reused by each session (`crate::names`) and a FIFO
//! queue's order is stable, so on a busy lock each waiter finds the watch
//! on its predecessor open and synced. Each watch is still on one key, the
//! predecessor's: no waiter hears of other entries.
//!
//! A waiter says which revision its view of the queue is from (`after`)
//! and learns what it must about the time before it joined: a deletion
//! already seen after `after` fires at once, and a watch whose history
//! starts later than `after` reports [`Fired::Created`] so the waiter reads
//! the gap.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::fired::{Fired, Listener};

/// How long a watch with no waiter left stays open.
pub(super) const LINGER: Duration = Duration::from_secs(5);
/// Most waiters' watches kept open: beyond that, idle ones close at once,
/// oldest first.
pub(super) const MOST_WATCHES: usize = 1024;

/// The waiters of one watched key.
#[derive(Default)]
pub(super) struct Waiters {
    /// The revision the server created the watch at: every deletion after
    /// it is heard. `None` until the server answered.
    created: Option<i64>,
    /// The revision of the last deletion heard (0: none).
    last_deletion: i64,
    /// Waiter id → (the revision its view is from, its listener).
    listeners: HashMap<i64, (i64, Listener)>,
    /// Since when nobody waits; `None` while someone does.
    idle_since: Option<Instant>,
}

impl Waiters {
    /// Adds a waiter whose view of the queue is from revision `after`.
    pub(super) fn join(&mut self, waiter: i64, after: i64, mut listener: Listener) {
        self.idle_since = None;
        if self.last_deletion > after {
            listener(Fired::Deleted {
                revision: self.last_deletion,
            });
            return;
        }
        if let Some(created) = self.created.filter(|created| *created > after) {
            listener(Fired::Created { revision: created });
        }
        self.listeners.insert(waiter, (after, listener));
    }

    /// Removes a waiter. True if nobody waits any more (idle from `now`).
    pub(super) fn leave(&mut self, waiter: i64, now: Instant) -> bool {
        if self.listeners.remove(&waiter).is_none() || !self.listeners.is_empty() {
            return false;
        }
        self.idle_since = Some(now);
        true
    }

    /// The server created the watch (again, after a reconnect: then the
    /// history is continuous and nobody needs telling).
    pub(super) fn created(&mut self, revision: i64) {
        if self.created.is_some() {
            return;
        }
        self.created = Some(revision);
        for (after, listener) in self.listeners.values_mut() {
            if revision > *after {
                listener(Fired::Created { revision });
            }
        }
    }

    /// The key was deleted at `revision`: every waiter is told and leaves
    /// (their ids are returned); the watch is idle from `now` if anyone
    /// was waiting.
    pub(super) fn deleted(&mut self, revision: i64, now: Instant) -> Vec<i64> {
        self.last_deletion = self.last_deletion.max(revision);
        let gone: Vec<i64> = self.listeners.keys().copied().collect();
        for (_, (_, mut listener)) in self.listeners.drain() {
            listener(Fired::Deleted { revision });
        }
        if !gone.is_empty() {
            self.idle_since = Some(now);
        }
        gone
    }

    /// The watch ended (compacted history, refused): every waiter is told.
    pub(super) fn end(self, fired: &Fired) -> Vec<i64> {
        let mut gone = Vec::new();
        for (waiter, (_, mut listener)) in self.listeners {
            listener(fired.clone());
            gone.push(waiter);
        }
        gone
    }

    /// Since when nobody waits, if nobody does.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        self.idle_since
    }
}

/// Which key's watch each waiter is on, and which watches are idle.
#[derive(Default)]
pub(super) struct WaiterIndex {
    /// Key → id of its lingering watch.
    pub(super) by_key: HashMap<Vec<u8>, i64>,
    /// Waiter id → watch id.
    pub(super) by_waiter: HashMap<i64, i64>,
    /// (idle since, watch id), oldest first; stale entries (the watch got
    /// a waiter again, or is gone) are skipped when they come up.
    pub(super) idle: VecDeque<(Instant, i64)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    type Heard = Arc<Mutex<Vec<Fired>>>;

    fn listener() -> (Heard, Listener) {
        let heard: Heard = Arc::default();
        let sink = Arc::clone(&heard);
        (
            heard,
            Box::new(move |fired| sink.lock().unwrap().push(fired)),
        )
    }

    fn heard(heard: &Heard) -> Vec<Fired> {
        heard.lock().unwrap().clone()
    }

    #[test]
    fn a_waiter_hears_the_creation_only_if_it_leaves_a_gap() {
        let mut waiters = Waiters::default();
        let (early, l) = listener();
        waiters.join(1, 10, l);
        let (late, l) = listener();
        waiters.join(2, 20, l);
        waiters.created(15);
        assert_eq!(heard(&early), [Fired::Created { revision: 15 }]);
        assert!(heard(&late).is_empty());
        // A reconnect re-creates the watch with its history intact.
        waiters.created(30);
        assert_eq!(heard(&early).len(), 1);
        // Joining a created watch: a gap only if the view is older.
        let (older, l) = listener();
        waiters.join(3, 12, l);
        assert_eq!(heard(&older), [Fired::Created { revision: 15 }]);
    }

    #[test]
    fn a_deletion_reaches_every_waiter_and_later_joiners_that_missed_it() {
        let now = Instant::now();
        let mut waiters = Waiters::default();
        waiters.created(5);
        let (a, l) = listener();
        waiters.join(1, 6, l);
        let gone = waiters.deleted(8, now);
        assert_eq!(gone, [1]);
        assert_eq!(heard(&a), [Fired::Deleted { revision: 8 }]);
        assert_eq!(waiters.idle_since(), Some(now));
        // Its view predates the deletion: told at once, not kept.
        let (b, l) = listener();
        waiters.join(2, 7, l);
        assert_eq!(heard(&b), [Fired::Deleted { revision: 8 }]);
        // Its view follows it: waits for the next one.
        let (c, l) = listener();
        waiters.join(3, 8, l);
        assert!(heard(&c).is_empty());
        assert_eq!(waiters.idle_since(), None);
        assert!(waiters.leave(3, now));
        assert!(!waiters.leave(3, now));
    }

    #[test]
    fn an_ended_watch_tells_every_waiter() {
        let mut waiters = Waiters::default();
        let (a, l) = listener();
        waiters.join(1, 1, l);
        let gone = waiters.end(&Fired::Compacted);
        assert_eq!(gone, [1]);
        assert_eq!(heard(&a), [Fired::Compacted]);
    }
}
