//! One server's pub/sub connection: the local interest in each channel,
//! and the dispatch of the server's push messages.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use lock_core::backend::WakeRegistry;
use lock_core::LockError;
use redis::aio::{AsyncPushSender, ConnectionManager, SendError};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch};

use super::{worker, EventSender, HolderEvent, Listening, Target};
use crate::config::RedisConfig;
use crate::conn;
use crate::grants::{parse_grant, GrantBoard};
use lock_core::url::HostPort;

/// Whether a channel's subscription is in force on one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
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

/// One server's pub/sub connection and its channel states.
#[derive(Debug)]
pub(super) struct NodeListener {
    shared: Arc<Shared>,
}

pub(super) struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
    /// Channels the worker should look at.
    todo: mpsc::UnboundedSender<String>,
    registry: WakeRegistry,
    grants: GrantBoard,
    /// How many times the connection broke; a subscription counts as in
    /// force only if it was confirmed under the current count.
    breaks: AtomicU64,
    /// Names the watchers of [`Channel::watchers`].
    next_watcher: AtomicU64,
}

pub(super) struct Channel {
    /// Local waiters and watchers interested in it.
    pub(super) refs: usize,
    /// When `refs` last dropped to zero.
    pub(super) idle_since: Option<Instant>,
    pub(super) state: watch::Sender<State>,
    /// Watchers of a holder channel, to hand its messages to.
    watchers: Vec<(u64, EventSender)>,
}

impl NodeListener {
    pub(super) fn start(
        config: &RedisConfig,
        target: &Target,
        registry: WakeRegistry,
        grants: GrantBoard,
    ) -> Result<Self, LockError> {
        let (todo, requests) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            todo,
            registry,
            grants,
            breaks: AtomicU64::new(0),
            next_watcher: AtomicU64::new(0),
        });
        if config.tls.is_some() {
            conn::install_crypto_provider();
        }
        let open = Opener {
            config: config.clone(),
            shared: Arc::downgrade(&shared),
        };
        let source = match target {
            Target::Fixed(node) => worker::Source::Fixed(open.connection(node)?),
            Target::Following(link) => worker::Source::Following {
                addresses: link.addresses(),
                open: Box::new(move |node| open.connection(node)),
            },
        };
        tokio::spawn(worker::run(
            source,
            requests,
            Arc::downgrade(&shared),
            conn::Timeouts::new(config).overall,
        ));
        Ok(Self { shared })
    }

    /// Registers interest in `channel` (and, for a watcher, where its
    /// messages go). No network traffic.
    pub(super) fn interest(&self, channel: &str, watcher: Option<EventSender>) -> Interest {
        let mut channels = self.shared.channels();
        let entry = channels
            .entry(channel.to_owned())
            .or_insert_with(|| Channel {
                refs: 0,
                idle_since: None,
                state: watch::Sender::new(State::Inactive),
                watchers: Vec::new(),
            });
        entry.refs += 1;
        entry.idle_since = None;
        let watcher = watcher.map(|sender| {
            let id = self.shared.next_watcher.fetch_add(1, Ordering::Relaxed);
            entry.watchers.push((id, sender));
            id
        });
        Interest {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            watcher,
        }
    }

    pub(super) async fn ensure(&self, channel: &str, timeout: Duration) -> Listening {
        let mut state = {
            let mut channels = self.shared.channels();
            let Some(entry) = channels.get_mut(channel) else {
                return Listening::Unavailable;
            };
            // Copied out: the borrow holds the watch's read lock.
            let current = *entry.state.borrow();
            match current {
                State::Active => return Listening::Already,
                State::Pending => {}
                State::Inactive | State::Stale | State::Failed => {
                    entry.state.send_replace(State::Pending);
                    let _ = self.shared.todo.send(channel.to_owned());
                }
            }
            entry.state.subscribe()
        };
        let settled = async move {
            state
                .wait_for(|s| !matches!(s, State::Pending | State::Inactive))
                .await
                .map(|s| *s)
        };
        match tokio::time::timeout(timeout, settled).await {
            Ok(Ok(State::Active)) => Listening::Now,
            _ => Listening::Unavailable,
        }
    }
}

/// Opens pub/sub connections that hand their push messages to one
/// listener's [`Shared`] state.
struct Opener {
    config: RedisConfig,
    shared: Weak<Shared>,
}

impl Opener {
    /// A connection to `node` (made on first use) that resubscribes by
    /// itself after a reconnect.
    fn connection(&self, node: &HostPort) -> Result<ConnectionManager, LockError> {
        let manager_config = conn::manager_config(&self.config)
            .set_push_sender(Dispatch(self.shared.clone()))
            .set_automatic_resubscription();
        let client = conn::client(&self.config, node)?;
        ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|e| LockError::invalid_config(format!("Redis pub/sub at {node}: {e}")))
    }
}

impl Shared {
    pub(super) fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // Every update is a single step; a poisoned map is still consistent.
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
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
            let channels = self.channels();
            for entry in channels.values() {
                entry.state.send_if_modified(|state| {
                    let active = *state == State::Active;
                    if active {
                        *state = State::Stale;
                    }
                    active
                });
                for (_, watcher) in &entry.watchers {
                    watcher.send(HolderEvent::Missed);
                }
            }
            channels.keys().cloned().collect()
        };
        for name in names {
            self.registry.wake(&name);
        }
        self.grants.wake_all();
    }

    /// Hands a message of `channel` to its watchers; false if it has none.
    fn to_watchers(&self, channel: &str, payload: &[u8]) -> bool {
        let channels = self.channels();
        match channels.get(channel) {
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

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("channels", &self.channels().len())
            .finish()
    }
}

/// One waiter's or watcher's interest in a channel on one server; dropped
/// with the waiter's `WakeSubscription` or the watcher's `HolderEvents`.
#[derive(Debug)]
pub(crate) struct Interest {
    shared: Arc<Shared>,
    channel: String,
    watcher: Option<u64>,
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut channels = self.shared.channels();
        if let Some(entry) = channels.get_mut(&self.channel) {
            if let Some(id) = self.watcher {
                entry.watchers.retain(|(watcher, _)| *watcher != id);
            }
            entry.refs = entry.refs.saturating_sub(1);
            if entry.refs == 0 {
                let state = *entry.state.borrow();
                if matches!(state, State::Inactive | State::Failed) {
                    // Never subscribed on the server (the uncontended case):
                    // forget it here, without waking the worker.
                    channels.remove(&self.channel);
                } else {
                    entry.idle_since = Some(Instant::now());
                    let _ = self.shared.todo.send(self.channel.clone());
                }
            }
        }
    }
}

/// Receives the server's push messages: a hand-off wakes its waiter, a
/// holder channel's message goes to its watchers, a release wakes the
/// channel's waiters, at once; a disconnect wakes everyone (messages may
/// be lost until the subscriptions are restored).
struct Dispatch(Weak<Shared>);

impl AsyncPushSender for Dispatch {
    fn send(&self, info: PushInfo) -> Result<(), SendError> {
        let Some(shared) = self.0.upgrade() else {
            return Err(SendError);
        };
        match info.kind {
            PushKind::Message => {
                let (Some(Value::BulkString(channel)), Some(Value::BulkString(payload))) =
                    (info.data.first(), info.data.get(1))
                else {
                    return Ok(());
                };
                let Ok(channel) = std::str::from_utf8(channel) else {
                    return Ok(());
                };
                if shared.to_watchers(channel, payload) {
                    return Ok(());
                }
                match parse_grant(payload) {
                    Some((token, owner)) => {
                        shared.grants.offer(owner, token);
                    }
                    None => {
                        shared.registry.wake(channel);
                    }
                }
            }
            PushKind::Disconnection => shared.disconnected(),
            _ => {}
        }
        Ok(())
    }
}
