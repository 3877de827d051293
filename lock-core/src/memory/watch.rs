//! Watches of a lock's holder in a memory store.
//!
//! The table keeps each lock's watchers ([`Watchers`]): every change of a
//! lock's first holder or of its value queues the new state on each
//! watcher of the name while the table is still locked
//! ([`Watchers::deliver`]), so each watcher gets every change, in the
//! order the table made them. [`MemoryWatch`] reads its queue as a
//! [`HolderSource`], and looks for a lease's end itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::object::ObjectId;
use super::Shared;
use crate::backend::{Change, HolderSource};
use crate::error::LockError;
use crate::info::LockInfo;
use crate::key::LockName;

/// A lock's holder as a watch hears it: the first live holder and when
/// its lease ends, or `None` when the lock is free.
pub(super) type HolderState = Option<(LockInfo, Instant)>;

/// How many states a watcher may have waiting unread; past that it is
/// told it missed some ([`WatchFeed::overflowed`]) and reads again.
pub(super) const WATCHER_QUEUE: usize = 1024;

/// One watch of one lock's holder, as the table keeps it.
#[derive(Debug)]
struct Watcher {
    id: u64,
    /// The state this watcher was last given (or read).
    last: Option<LockInfo>,
    states: mpsc::Sender<HolderState>,
    overflowed: Arc<AtomicBool>,
}

/// The receiving end of a watch set with [`Table::watch`](super::table::Table::watch).
#[derive(Debug)]
pub(super) struct WatchFeed {
    /// The watcher's id, for [`Table::rewatch`](super::table::Table::rewatch) and [`Table::unwatch`](super::table::Table::unwatch).
    pub(super) id: u64,
    /// Every state after the read that set the watch, in order.
    pub(super) states: mpsc::Receiver<HolderState>,
    /// Set when a state could not be queued (the queue was full).
    pub(super) overflowed: Arc<AtomicBool>,
}

impl WatchFeed {
    /// Drops every state queued and the overflow mark: the watcher is
    /// about to read the holder again.
    pub(super) fn clear(&mut self) {
        while self.states.try_recv().is_ok() {}
        self.overflowed.store(false, Ordering::SeqCst);
    }
}

/// The watches of each lock's holder, as the table keeps them.
#[derive(Debug, Default)]
pub(super) struct Watchers {
    by_name: HashMap<LockName, Vec<Watcher>>,
    next_watcher: u64,
}

impl Watchers {
    /// Whether `name`'s lock has a watcher.
    pub(super) fn any(&self, name: &LockName) -> bool {
        self.by_name.contains_key(name)
    }

    /// A new watcher of `name`'s lock, last given `now`; the feed of every
    /// later state.
    pub(super) fn add(&mut self, name: &LockName, now: &HolderState) -> WatchFeed {
        let (sender, states) = mpsc::channel(WATCHER_QUEUE);
        let overflowed = Arc::new(AtomicBool::new(false));
        self.next_watcher += 1;
        let id = self.next_watcher;
        self.by_name.entry(name.clone()).or_default().push(Watcher {
            id,
            last: now.as_ref().map(|(info, _)| info.clone()),
            states: sender,
            overflowed: Arc::clone(&overflowed),
        });
        WatchFeed {
            id,
            states,
            overflowed,
        }
    }

    /// Takes `now` as the state watcher `id` of `name` was last given (it
    /// read it); false if that watcher is gone.
    pub(super) fn read_again(&mut self, name: &LockName, id: u64, now: &HolderState) -> bool {
        let watcher = self
            .by_name
            .get_mut(name)
            .and_then(|watchers| watchers.iter_mut().find(|w| w.id == id));
        match watcher {
            Some(watcher) => {
                watcher.last = now.as_ref().map(|(info, _)| info.clone());
                true
            }
            None => false,
        }
    }

    /// Stops watcher `id` of `name`.
    pub(super) fn remove(&mut self, name: &LockName, id: u64) {
        if let Some(watchers) = self.by_name.get_mut(name) {
            watchers.retain(|w| w.id != id);
            if watchers.is_empty() {
                self.by_name.remove(name);
            }
        }
    }

    /// Queues `now`, the holder of `name`'s lock, on each of its watchers
    /// that was last given another state; a watcher whose queue is full is
    /// marked overflowed, one whose watch is gone is dropped.
    pub(super) fn deliver(&mut self, name: &LockName, now: &HolderState) {
        let Some(watchers) = self.by_name.get_mut(name) else {
            return;
        };
        watchers.retain_mut(|watcher| {
            let same = match (&watcher.last, now) {
                (None, None) => true,
                (Some(last), Some((info, _))) => last.same_state(info),
                _ => false,
            };
            if same {
                return true;
            }
            watcher.last = now.as_ref().map(|(info, _)| info.clone());
            match watcher.states.try_send(now.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    watcher.overflowed.store(true, Ordering::SeqCst);
                    true
                }
                // The watch is gone.
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        if watchers.is_empty() {
            self.by_name.remove(name);
        }
    }
}

/// A watch of one lock in a memory store: the table queues every change
/// of the lock's holder on it as it makes it ([`Table::watch`](super::table::Table::watch)), so every
/// change is reported. At the holder's lease end, which nothing
/// announces, the watch looks for the expiry itself, as a waiter would.
pub(super) struct MemoryWatch {
    store: Arc<Shared>,
    name: LockName,
    /// The states queued for this watch; `None` until the first read.
    feed: Option<WatchFeed>,
    /// When the lease of the holder last reported ends.
    expires_at: Option<Instant>,
}

impl MemoryWatch {
    /// A watch of `name`'s lock in `store`, set at its first read.
    pub(super) fn new(store: Arc<Shared>, name: &LockName) -> Self {
        Self {
            store,
            name: name.clone(),
            feed: None,
            expires_at: None,
        }
    }

    /// Takes `state` as the one last reported.
    fn report(&mut self, state: HolderState) -> Option<LockInfo> {
        self.expires_at = state.as_ref().map(|(_, expires_at)| *expires_at);
        state.map(|(info, _)| info)
    }
}

#[async_trait]
impl HolderSource for MemoryWatch {
    async fn read(&mut self) -> Result<Option<LockInfo>, LockError> {
        let state = {
            let mut table = self.store.table();
            match self.feed.as_mut() {
                Some(feed) => table.rewatch(&self.name, feed),
                None => {
                    let (state, feed) = table.watch(&self.name);
                    self.feed = Some(feed);
                    state
                }
            }
        };
        Ok(self.report(state))
    }

    async fn next_change(&mut self) -> Result<Change, LockError> {
        loop {
            let Some(feed) = self.feed.as_mut() else {
                return Ok(Change::Reread);
            };
            if feed.overflowed.load(Ordering::SeqCst) {
                // More than the queue holds went unread: read again.
                return Ok(Change::Reread);
            }
            let expires_at = self.expires_at;
            let expiry = async move {
                match expires_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                state = feed.states.recv() => {
                    let Some(state) = state else {
                        return Ok(Change::Reread);
                    };
                    return Ok(Change::Holder(self.report(state)));
                }
                () = expiry => {
                    // Nothing announces an expiry: look for it (and let in
                    // whom it frees); the change it makes is queued on
                    // this watch like any other. A lease renewed meanwhile
                    // ends later.
                    let id = ObjectId::lock(&self.name);
                    let (woken, holder) = {
                        let mut table = self.store.table();
                        let woken = table.dispatch(&id);
                        (woken, table.lock_holder(&self.name))
                    };
                    self.store.woke(woken);
                    self.expires_at = holder.map(|(_, expires_at)| expires_at);
                }
            }
        }
    }
}

impl Drop for MemoryWatch {
    fn drop(&mut self) {
        if let Some(feed) = &self.feed {
            self.store.table().unwatch(&self.name, feed.id);
        }
    }
}
