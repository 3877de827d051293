//! The task that owns one server's pub/sub connection: it subscribes and
//! unsubscribes in batches, as local interest asks, and, for a master
//! Redis Sentinel names, moves the connection when the master moves.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Weak;
use std::time::{Duration, Instant};

use lock_core::url::HostPort;
use lock_core::LockError;
use redis::aio::ConnectionManager;
use tokio::sync::{mpsc, watch};

use super::channels::{NodeChannels, Subscription, LINGER};

/// What one round of the worker sends to the server.
#[derive(Debug, Default)]
struct Plan {
    subscribe: Vec<String>,
    unsubscribe: Vec<String>,
}

/// Opens a pub/sub connection to one address.
pub(super) type OpenFn = Box<dyn Fn(&HostPort) -> Result<ConnectionManager, LockError> + Send>;

/// Where the worker's connection goes.
pub(super) enum Source {
    /// Always this connection.
    Fixed(ConnectionManager),
    /// A connection to each address `addresses` announces, made by `open`.
    Following {
        addresses: watch::Receiver<Option<HostPort>>,
        open: OpenFn,
    },
}

impl Source {
    /// The connection to use now, if there is one yet.
    fn initial(&mut self) -> Option<ConnectionManager> {
        match self {
            Source::Fixed(connection) => Some(connection.clone()),
            Source::Following { addresses, open } => open_announced(addresses, open),
        }
    }

    /// The next connection, once the followed address moves; never for a
    /// fixed one.
    async fn moved(&mut self) -> Option<ConnectionManager> {
        let Source::Following { addresses, open } = self else {
            return std::future::pending().await;
        };
        loop {
            if addresses.changed().await.is_err() {
                // The link is gone, and the backend with it.
                return std::future::pending().await;
            }
            if let Some(connection) = open_announced(addresses, open) {
                return Some(connection);
            }
        }
    }
}

/// A connection to the address `addresses` announces now, if any (and
/// marks that announcement seen).
fn open_announced(
    addresses: &mut watch::Receiver<Option<HostPort>>,
    open: &OpenFn,
) -> Option<ConnectionManager> {
    let now = addresses.borrow_and_update().clone();
    now.and_then(|address| open(&address).ok())
}

/// Owns the pub/sub connection; subscribes and unsubscribes in batches.
pub(super) async fn run(
    mut source: Source,
    requests: mpsc::UnboundedReceiver<String>,
    channels: Weak<NodeChannels>,
    timeout: Duration,
) {
    let mut worker = Worker {
        connection: source.initial(),
        source,
        requests,
        channels,
        timeout,
        subscribed: HashMap::new(),
        lingering: BTreeMap::new(),
    };
    while let Some((batch, now)) = worker.next_batch().await {
        let Some((plan, breaks)) = worker.plan(batch, now) else {
            return;
        };
        if !plan.subscribe.is_empty() && !worker.subscribe(&plan.subscribe, breaks).await {
            return;
        }
        if !plan.unsubscribe.is_empty() {
            worker.unsubscribe(&plan.unsubscribe).await;
        }
    }
}

/// The task's state from one round to the next.
struct Worker {
    source: Source,
    connection: Option<ConnectionManager>,
    requests: mpsc::UnboundedReceiver<String>,
    channels: Weak<NodeChannels>,
    timeout: Duration,
    /// The channels subscribed on the server, each with the number of
    /// connection breaks when the server confirmed it.
    subscribed: HashMap<String, u64>,
    /// Idle channels to look at again once their linger is over.
    lingering: BTreeMap<Instant, Vec<String>>,
}

impl Worker {
    /// Waits for channels to look at (asked for, or whose linger is
    /// over), moving the connection meanwhile if the master moves; the
    /// channels and the time they were gathered. `None` once the listener
    /// is gone.
    async fn next_batch(&mut self) -> Option<(HashSet<String>, Instant)> {
        let mut batch: HashSet<String> = HashSet::new();
        loop {
            let next_linger = self.lingering.keys().next().copied();
            tokio::select! {
                request = self.requests.recv() => {
                    batch.insert(request?);
                    break;
                }
                () = sleep_until_or_forever(next_linger) => break,
                moved = self.source.moved() => self.moved(moved)?,
            }
        }
        while let Ok(channel) = self.requests.try_recv() {
            batch.insert(channel);
        }
        let now = Instant::now();
        while let Some(entry) = self.lingering.first_entry() {
            if *entry.key() > now {
                break;
            }
            batch.extend(entry.remove());
        }
        Some((batch, now))
    }

    /// The followed master moved to `connection`. The old server's
    /// subscriptions go with its connection: every channel is subscribed
    /// again, on the new one, as its waiters ask. `None` once the
    /// listener is gone.
    fn moved(&mut self, connection: Option<ConnectionManager>) -> Option<()> {
        self.connection = connection;
        self.subscribed.clear();
        self.channels.upgrade()?.disconnected();
        Some(())
    }

    /// What to send for `batch`, and the connection breaks so far; `None`
    /// once the listener is gone.
    fn plan(&mut self, batch: HashSet<String>, now: Instant) -> Option<(Plan, u64)> {
        let channels = self.channels.upgrade()?;
        let breaks = channels.breaks();
        let plan = plan(
            &channels,
            &self.subscribed,
            breaks,
            batch,
            now,
            &mut self.lingering,
        );
        Some((plan, breaks))
    }

    /// Subscribes `names` (asked for when the connection had broken
    /// `breaks` times) and tells their waiters how it went; false once
    /// the listener is gone.
    async fn subscribe(&mut self, names: &[String], breaks: u64) -> bool {
        let outcome = match self.connection.as_mut() {
            Some(c) => tokio::time::timeout(self.timeout, c.subscribe(names)).await,
            None => Ok(Err(no_master_yet())),
        };
        let Some(channels) = self.channels.upgrade() else {
            return false;
        };
        let state = match outcome {
            // Confirmed on a connection that has not broken since the
            // request went out: in force. Otherwise the automatic
            // resubscription restores it, but unconfirmed.
            Ok(Ok(())) if channels.breaks() == breaks => Subscription::Active,
            Ok(Ok(())) => Subscription::Stale,
            Ok(Err(error)) => {
                tracing::debug!(%error, "distlock: pub/sub subscribe failed; waiters poll");
                Subscription::Failed
            }
            Err(_) => Subscription::Failed,
        };
        if matches!(state, Subscription::Active | Subscription::Stale) {
            for name in names {
                self.subscribed.insert(name.clone(), breaks);
            }
        }
        let entries = channels.entries();
        for name in names {
            if let Some(entry) = entries.get(name) {
                entry.state.send_replace(state);
            }
        }
        true
    }

    /// Unsubscribes `names`, whatever the outcome: a failed unsubscribe
    /// means a broken connection, whose replacement starts without them.
    async fn unsubscribe(&mut self, names: &[String]) {
        if let Some(c) = self.connection.as_mut() {
            let _ = tokio::time::timeout(self.timeout, c.unsubscribe(names)).await;
        }
        for name in names {
            self.subscribed.remove(name);
        }
    }
}

/// Compares local interest in the channels of `batch` with the server's
/// subscriptions (`breaks`: the connection breaks so far).
fn plan(
    node: &NodeChannels,
    subscribed: &HashMap<String, u64>,
    breaks: u64,
    batch: HashSet<String>,
    now: Instant,
    lingering: &mut BTreeMap<Instant, Vec<String>>,
) -> Plan {
    let mut plan = Plan::default();
    let mut channels = node.entries();
    for channel in batch {
        let Some(entry) = channels.get(&channel) else {
            if subscribed.contains_key(&channel) {
                plan.unsubscribe.push(channel);
            }
            continue;
        };
        if entry.refs > 0 {
            let wanted = matches!(*entry.state.borrow(), Subscription::Pending);
            if wanted && subscribed.get(&channel) == Some(&breaks) {
                entry.state.send_replace(Subscription::Active);
            } else if wanted {
                plan.subscribe.push(channel);
            }
            continue;
        }
        let until = entry.idle_since.unwrap_or(now) + LINGER;
        if now >= until {
            channels.remove(&channel);
            if subscribed.contains_key(&channel) {
                plan.unsubscribe.push(channel);
            }
        } else {
            lingering.entry(until).or_default().push(channel);
        }
    }
    plan
}

fn no_master_yet() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "no master known yet",
    ))
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
