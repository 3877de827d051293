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

use super::node::{Shared, State};
use super::LINGER;

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
    mut requests: mpsc::UnboundedReceiver<String>,
    shared: Weak<Shared>,
    timeout: Duration,
) {
    let mut connection = source.initial();
    // The channels subscribed on the server, each with the number of
    // connection breaks when the server confirmed it.
    let mut subscribed: HashMap<String, u64> = HashMap::new();
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
            moved = source.moved() => {
                // The old server's subscriptions go with its connection:
                // every channel is subscribed again, on the new one, as
                // its waiters ask.
                connection = moved;
                subscribed.clear();
                match shared.upgrade() {
                    Some(shared) => shared.disconnected(),
                    None => return,
                }
                continue;
            }
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
        let (plan, breaks) = match shared.upgrade() {
            Some(shared) => {
                let breaks = shared.breaks();
                let plan = plan(&shared, &subscribed, breaks, batch, now, &mut lingering);
                (plan, breaks)
            }
            None => return,
        };
        if !plan.subscribe.is_empty() {
            let outcome = match connection.as_mut() {
                Some(c) => tokio::time::timeout(timeout, c.subscribe(&plan.subscribe)).await,
                None => Ok(Err(no_master_yet())),
            };
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let state = match outcome {
                // Confirmed on a connection that has not broken since the
                // request went out: in force. Otherwise the automatic
                // resubscription restores it, but unconfirmed.
                Ok(Ok(())) if shared.breaks() == breaks => State::Active,
                Ok(Ok(())) => State::Stale,
                Ok(Err(error)) => {
                    tracing::debug!(%error, "distlock: pub/sub subscribe failed; waiters poll");
                    State::Failed
                }
                Err(_) => State::Failed,
            };
            if matches!(state, State::Active | State::Stale) {
                for channel in &plan.subscribe {
                    subscribed.insert(channel.clone(), breaks);
                }
            }
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
            if let Some(c) = connection.as_mut() {
                let _ = tokio::time::timeout(timeout, c.unsubscribe(&plan.unsubscribe)).await;
            }
            for channel in &plan.unsubscribe {
                subscribed.remove(channel);
            }
        }
    }
}

/// Compares local interest in the channels of `batch` with the server's
/// subscriptions (`breaks`: the connection breaks so far).
fn plan(
    shared: &Shared,
    subscribed: &HashMap<String, u64>,
    breaks: u64,
    batch: HashSet<String>,
    now: Instant,
    lingering: &mut BTreeMap<Instant, Vec<String>>,
) -> Plan {
    let mut plan = Plan::default();
    let mut channels = shared.channels();
    for channel in batch {
        let Some(entry) = channels.get(&channel) else {
            if subscribed.contains_key(&channel) {
                plan.unsubscribe.push(channel);
            }
            continue;
        };
        if entry.refs > 0 {
            let wanted = matches!(*entry.state.borrow(), State::Pending);
            if wanted && subscribed.get(&channel) == Some(&breaks) {
                entry.state.send_replace(State::Active);
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
