//! [`NodeChannels`]: what one server's pub/sub connection shares with its
//! worker and its push messages — the local interest in each channel and
//! the state of its subscription, how often the connection broke, and
//! whom a message wakes.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lock_core::backend::WakeRegistry;
use tokio::sync::{mpsc, watch};

use super::events::{EventSender, HolderEvent};
use crate::grants::GrantBoard;

/// How long a channel stays subscribed after its last waiter left.
pub(super) const LINGER: Duration = Duration::from_millis(500);

/// Whether a channel's subscription is in force on one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Subscription {
    /// Not asked for yet.
    Inactive,
    /// Asked for; the worker has not confirmed it.
    Pending,
    /// Confirmed by the server since the connection last broke.
    Active,
    /// Confirmed once, but the connection broke since: the automatic
    /// resubscription may or may not have restored it yet.
    Stale,
    /// The last attempt failed (server unreachable).
    Failed,
}

/// One server's channels, and whom their messages reach.
pub(super) struct NodeChannels {
    entries: Mutex<HashMap<String, Channel>>,
    /// Channels the worker should look at.
    pub(super) todo: mpsc::UnboundedSender<String>,
    /// Whom a release wakes.
    pub(super) registry: WakeRegistry,
    /// Where hand-offs to this backend's waiters are posted.
    pub(super) grants: GrantBoard,
    /// How many times the connection broke; a subscription counts as in
    /// force only if it was confirmed under the current count.
    breaks: AtomicU64,
    /// Names the watchers of [`Channel::watchers`].
    next_watcher: AtomicU64,
}

/// The local interest in one channel on one server.
pub(super) struct Channel {
    /// Local waiters and watchers interested in it.
    pub(super) refs: usize,
    /// When `refs` last dropped to zero.
    pub(super) idle_since: Option<Instant>,
    pub(super) state: watch::Sender<Subscription>,
    /// Watchers of a holder channel, to hand its messages to.
    watchers: Vec<(u64, EventSender)>,
}

impl NodeChannels {
    /// No channel yet; `todo` reaches the worker.
    pub(super) fn new(
        todo: mpsc::UnboundedSender<String>,
        registry: WakeRegistry,
        grants: GrantBoard,
    ) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            todo,
            registry,
            grants,
            breaks: AtomicU64::new(0),
            next_watcher: AtomicU64::new(0),
        }
    }

    /// Every channel someone is or was lately interested in.
    pub(super) fn entries(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // Every update is a single step; a poisoned map is still consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers interest in `channel` (and, for a watcher, where its
    /// messages go). No network traffic.
    pub(super) fn interest(
        self: &Arc<Self>,
        channel: &str,
        watcher: Option<EventSender>,
    ) -> Interest {
        let mut entries = self.entries();
        let entry = entries
            .entry(channel.to_owned())
            .or_insert_with(|| Channel {
                refs: 0,
                idle_since: None,
                state: watch::Sender::new(Subscription::Inactive),
                watchers: Vec::new(),
            });
        entry.refs += 1;
        entry.idle_since = None;
        let watcher = watcher.map(|sender| {
            let id = self.next_watcher.fetch_add(1, Ordering::Relaxed);
            entry.watchers.push((id, sender));
            id
        });
        Interest {
            channels: Arc::clone(self),
            channel: channel.to_owned(),
            watcher,
        }
    }

    /// How many times the connection broke so far.
    pub(super) fn breaks(&self) -> u64 {
        self.breaks.load(Ordering::SeqCst)
    }

    /// The connection broke (or was replaced): nothing counts as
    /// subscribed until confirmed again; waiters try again, watchers read
    /// again.
    pub(super) fn disconnected(&self) {
        self.breaks.fetch_add(1, Ordering::SeqCst);
        let names: Vec<String> = {
            let entries = self.entries();
            for entry in entries.values() {
                entry.state.send_if_modified(|state| {
                    let active = *state == Subscription::Active;
                    if active {
                        *state = Subscription::Stale;
                    }
                    active
                });
                for (_, watcher) in &entry.watchers {
                    watcher.send(HolderEvent::Missed);
                }
            }
            entries.keys().cloned().collect()
        };
        for name in names {
            self.registry.wake(&name);
        }
        self.grants.wake_all();
    }

    /// Hands a message of `channel` to its watchers; false if it has none.
    pub(super) fn to_watchers(&self, channel: &str, payload: &[u8]) -> bool {
        let entries = self.entries();
        match entries.get(channel) {
            Some(entry) if !entry.watchers.is_empty() => {
                for (_, watcher) in &entry.watchers {
                    watcher.send(HolderEvent::Message(payload.to_vec()));
                }
                true
            }
            _ => false,
        }
    }
}

impl fmt::Debug for NodeChannels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeChannels")
            .field("channels", &self.entries().len())
            .finish()
    }
}

/// One waiter's or watcher's interest in a channel on one server; dropped
/// with the waiter's `WakeSubscription` or the watcher's `HolderEvents`.
#[derive(Debug)]
pub(crate) struct Interest {
    channels: Arc<NodeChannels>,
    channel: String,
    watcher: Option<u64>,
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut entries = self.channels.entries();
        if let Some(entry) = entries.get_mut(&self.channel) {
            if let Some(id) = self.watcher {
                entry.watchers.retain(|(watcher, _)| *watcher != id);
            }
            entry.refs = entry.refs.saturating_sub(1);
            if entry.refs == 0 {
                let state = *entry.state.borrow();
                if matches!(state, Subscription::Inactive | Subscription::Failed) {
                    // Never subscribed on the server (the uncontended case):
                    // forget it here, without waking the worker.
                    entries.remove(&self.channel);
                } else {
                    entry.idle_since = Some(Instant::now());
                    let _ = self.channels.todo.send(self.channel.clone());
                }
            }
        }
    }
}
