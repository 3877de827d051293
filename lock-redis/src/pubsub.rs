//! Release notifications: one pub/sub connection per server, shared by all
//! waiters of a backend.
//!
//! Two kinds of messages arrive: `"granted <token> <owner>"`, a hand-off
//! to one queued waiter of this backend (see [`grants`](crate::grants)),
//! published on the backend's own grant channel and waking that waiter
//! alone; and `"released"` on a lock's channel (Redlock, whose masters
//! keep no queue), which wakes every local waiter of that lock.
//!
//! A waiter registers interest in its lock's channel ([`Listener::watch`])
//! without any network traffic. Only when an attempt finds the lock held
//! does it make sure the channel is subscribed ([`Listener::ensure_listening`]);
//! uncontended locks never touch pub/sub. A worker task owns the
//! connection and reconciles the server's subscriptions with local
//! interest in batches: it subscribes channels someone waits on and
//! unsubscribes a channel once nobody has waited on it for [`LINGER`]
//! (so a hot key is not unsubscribed and subscribed again between two
//! waits).
//!
//! The connection is a RESP3 [`ConnectionManager`] with automatic
//! resubscription: after a reconnect the server's subscriptions are
//! restored. Messages published meanwhile are lost, so on a disconnect
//! every waiter is woken to try again, and waits are bounded by the
//! holder's remaining lease anyway.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use lock_core::backend::{WakeRegistry, WakeSubscription};
use lock_core::{LockError, OwnerId};
use redis::aio::{AsyncPushSender, ConnectionManager, SendError};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch};

use crate::config::RedisConfig;
use crate::conn;
use crate::grants::{parse_grant, GrantBoard, GrantTicket};
use lock_core::url::HostPort;

/// How long a channel stays subscribed after its last waiter left.
pub(crate) const LINGER: Duration = Duration::from_millis(500);

/// Whether a channel's subscription is in force on one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Not asked for yet.
    Inactive,
    /// Asked for; the worker has not confirmed it.
    Pending,
    /// Confirmed by the server.
    Active,
    /// The last attempt failed (server unreachable).
    Failed,
}

/// What [`Listener::ensure_listening`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listening {
    /// The channel was already subscribed before the caller's attempt: a
    /// release after that attempt will be heard.
    Already,
    /// It was subscribed just now: a release may have slipped between the
    /// caller's attempt and the subscription, so attempt once more.
    Now,
    /// It could not be subscribed: fall back to polling.
    Unavailable,
}

/// Release notifications from one or more servers (several for Redlock),
/// all waking the same [`WakeRegistry`].
#[derive(Clone, Debug)]
pub(crate) struct Listener {
    registry: WakeRegistry,
    grants: GrantBoard,
    grant_channel: Arc<str>,
    /// Standing interest in the grant channel: once a first waiter had it
    /// subscribed, it stays subscribed for the backend's life, so waits
    /// and uncontended locks never churn its subscription.
    _grant_interest: Arc<Vec<Interest>>,
    nodes: Arc<Vec<NodeListener>>,
    timeout: Duration,
}

impl Listener {
    /// A listener over `nodes` of `config`; connects on first use.
    pub(crate) fn new(config: &RedisConfig, nodes: &[HostPort]) -> Result<Self, LockError> {
        let registry = WakeRegistry::new();
        let grants = GrantBoard::new(registry.clone());
        let nodes = nodes
            .iter()
            .map(|node| NodeListener::start(config, node, registry.clone(), grants.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let grant_channel = format!("distlock:grants:{}", OwnerId::generate());
        let grant_interest = nodes.iter().map(|n| n.interest(&grant_channel)).collect();
        Ok(Self {
            registry,
            grants,
            grant_channel: grant_channel.into(),
            _grant_interest: Arc::new(grant_interest),
            nodes: Arc::new(nodes),
            timeout: conn::Timeouts::new(config).overall,
        })
    }

    /// Registers interest in `channel`'s releases. No network traffic.
    pub(crate) fn watch(&self, channel: &str) -> WakeSubscription {
        let interests: Vec<Interest> = self.nodes.iter().map(|n| n.interest(channel)).collect();
        self.registry.subscribe(channel).with_guard(interests)
    }

    /// The channel hand-offs to this backend's waiters are published on:
    /// one per backend, so a hand-off reaches only the process (and the
    /// connection) of the waiter it is for.
    pub(crate) fn grant_channel(&self) -> &str {
        &self.grant_channel
    }

    /// Registers a queued waiter with `owner` id: hand-offs to it will be
    /// posted on its ticket. No network traffic.
    pub(crate) fn ticket(&self, owner: &str) -> GrantTicket {
        self.grants.ticket(owner)
    }

    /// Makes sure `channel` is subscribed on every server, for a caller
    /// holding a [`watch`](Self::watch) subscription on it.
    pub(crate) async fn ensure_listening(&self, channel: &str) -> Listening {
        let waits = self.nodes.iter().map(|n| n.ensure(channel, self.timeout));
        let results = futures_util::future::join_all(waits).await;
        if results.contains(&Listening::Now) {
            Listening::Now
        } else if results.contains(&Listening::Already) {
            Listening::Already
        } else {
            Listening::Unavailable
        }
    }
}

/// One server's pub/sub connection and its channel states.
#[derive(Debug)]
struct NodeListener {
    shared: Arc<Shared>,
}

struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
    /// Channels the worker should look at.
    todo: mpsc::UnboundedSender<String>,
    registry: WakeRegistry,
    grants: GrantBoard,
}

struct Channel {
    /// Local waiters interested in it.
    refs: usize,
    /// When `refs` last dropped to zero.
    idle_since: Option<Instant>,
    state: watch::Sender<State>,
}

impl NodeListener {
    fn start(
        config: &RedisConfig,
        node: &HostPort,
        registry: WakeRegistry,
        grants: GrantBoard,
    ) -> Result<Self, LockError> {
        let (todo, requests) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            todo,
            registry,
            grants,
        });
        let dispatch = Dispatch(Arc::downgrade(&shared));
        let manager_config = conn::manager_config(config)
            .set_push_sender(dispatch)
            .set_automatic_resubscription();
        if config.tls.is_some() {
            conn::install_crypto_provider();
        }
        let client = conn::client(config, node)?;
        let connection = ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|e| LockError::invalid_config(format!("Redis pub/sub at {node}: {e}")))?;
        tokio::spawn(worker(
            connection,
            requests,
            Arc::downgrade(&shared),
            conn::Timeouts::new(config).overall,
        ));
        Ok(Self { shared })
    }

    fn interest(&self, channel: &str) -> Interest {
        let mut channels = self.shared.channels();
        let entry = channels
            .entry(channel.to_owned())
            .or_insert_with(|| Channel {
                refs: 0,
                idle_since: None,
                state: watch::Sender::new(State::Inactive),
            });
        entry.refs += 1;
        entry.idle_since = None;
        Interest {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
        }
    }

    async fn ensure(&self, channel: &str, timeout: Duration) -> Listening {
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
                State::Inactive | State::Failed => {
                    entry.state.send_replace(State::Pending);
                    let _ = self.shared.todo.send(channel.to_owned());
                }
            }
            entry.state.subscribe()
        };
        let settled = async move {
            state
                .wait_for(|s| matches!(s, State::Active | State::Failed))
                .await
                .map(|s| *s)
        };
        match tokio::time::timeout(timeout, settled).await {
            Ok(Ok(State::Active)) => Listening::Now,
            _ => Listening::Unavailable,
        }
    }
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // Every update is a single step; a poisoned map is still consistent.
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake_all(&self) {
        let names: Vec<String> = self.channels().keys().cloned().collect();
        for name in names {
            self.registry.wake(&name);
        }
        self.grants.wake_all();
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("channels", &self.channels().len())
            .finish()
    }
}

/// One waiter's interest in a channel on one server; dropped with the
/// waiter's [`WakeSubscription`].
#[derive(Debug)]
struct Interest {
    shared: Arc<Shared>,
    channel: String,
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut channels = self.shared.channels();
        if let Some(entry) = channels.get_mut(&self.channel) {
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
/// release wakes the channel's waiters, at once; a disconnect wakes
/// everyone (messages may be lost until the subscriptions are restored).
struct Dispatch(Weak<Shared>);

impl AsyncPushSender for Dispatch {
    fn send(&self, info: PushInfo) -> Result<(), SendError> {
        let Some(shared) = self.0.upgrade() else {
            return Err(SendError);
        };
        match info.kind {
            PushKind::Message => {
                let grant = match info.data.get(1) {
                    Some(Value::BulkString(payload)) => parse_grant(payload),
                    _ => None,
                };
                if let Some((token, owner)) = grant {
                    shared.grants.offer(owner, token);
                } else if let Some(Value::BulkString(channel)) = info.data.first() {
                    if let Ok(channel) = std::str::from_utf8(channel) {
                        shared.registry.wake(channel);
                    }
                }
            }
            PushKind::Disconnection => shared.wake_all(),
            _ => {}
        }
        Ok(())
    }
}

/// What one round of the worker sends to the server.
#[derive(Debug, Default)]
struct Plan {
    subscribe: Vec<String>,
    unsubscribe: Vec<String>,
}

/// Owns the pub/sub connection; subscribes and unsubscribes in batches.
async fn worker(
    mut connection: ConnectionManager,
    mut requests: mpsc::UnboundedReceiver<String>,
    shared: Weak<Shared>,
    timeout: Duration,
) {
    let mut subscribed: HashSet<String> = HashSet::new();
    // Idle channels to look at again once their linger is over.
    let mut lingering: BTreeMap<Instant, Vec<String>> = BTreeMap::new();
    loop {
        let mut batch: HashSet<String> = HashSet::new();
        let next_linger = lingering.keys().next().copied();
        tokio::select! {
            request = requests.recv() => match request {
                Some(channel) => { batch.insert(channel); }
                None => return,
            },
            () = sleep_until_or_forever(next_linger) => {}
        }
        while let Ok(channel) = requests.try_recv() {
            batch.insert(channel);
        }
        let now = Instant::now();
        while let Some(entry) = lingering.first_entry() {
            if *entry.key() > now {
                break;
            }
            batch.extend(entry.remove());
        }
        let plan = match shared.upgrade() {
            Some(shared) => plan(&shared, &subscribed, batch, now, &mut lingering),
            None => return,
        };
        if !plan.subscribe.is_empty() {
            let outcome =
                tokio::time::timeout(timeout, connection.subscribe(&plan.subscribe)).await;
            let state = match outcome {
                Ok(Ok(())) => {
                    subscribed.extend(plan.subscribe.iter().cloned());
                    State::Active
                }
                Ok(Err(error)) => {
                    tracing::debug!(%error, "distlock: pub/sub subscribe failed; waiters poll");
                    State::Failed
                }
                Err(_) => State::Failed,
            };
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let channels = shared.channels();
            for channel in &plan.subscribe {
                if let Some(entry) = channels.get(channel) {
                    entry.state.send_replace(state);
                }
            }
        }
        if !plan.unsubscribe.is_empty() {
            // Whatever the outcome: a failed unsubscribe means a broken
            // connection, whose replacement starts without the channel.
            let _ = tokio::time::timeout(timeout, connection.unsubscribe(&plan.unsubscribe)).await;
            for channel in &plan.unsubscribe {
                subscribed.remove(channel);
            }
        }
    }
}

/// Compares local interest in the channels of `batch` with the server's
/// subscriptions.
fn plan(
    shared: &Shared,
    subscribed: &HashSet<String>,
    batch: HashSet<String>,
    now: Instant,
    lingering: &mut BTreeMap<Instant, Vec<String>>,
) -> Plan {
    let mut plan = Plan::default();
    let mut channels = shared.channels();
    for channel in batch {
        let Some(entry) = channels.get(&channel) else {
            if subscribed.contains(&channel) {
                plan.unsubscribe.push(channel);
            }
            continue;
        };
        if entry.refs > 0 {
            let wanted = matches!(*entry.state.borrow(), State::Pending);
            if wanted && subscribed.contains(&channel) {
                entry.state.send_replace(State::Active);
            } else if wanted {
                plan.subscribe.push(channel);
            }
            continue;
        }
        let until = entry.idle_since.unwrap_or(now) + LINGER;
        if now >= until {
            channels.remove(&channel);
            if subscribed.contains(&channel) {
                plan.unsubscribe.push(channel);
            }
        } else {
            lingering.entry(until).or_default().push(channel);
        }
    }
    plan
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
