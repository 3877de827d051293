//! The task that owns one server's pub/sub connection: it subscribes and
//! unsubscribes in batches, as local interest asks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Weak;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use tokio::sync::mpsc;

use super::node::{Shared, State};
use super::LINGER;

/// What one round of the worker sends to the server.
#[derive(Debug, Default)]
struct Plan {
    subscribe: Vec<String>,
    unsubscribe: Vec<String>,
}

/// Owns the pub/sub connection; subscribes and unsubscribes in batches.
pub(super) async fn run(
    mut connection: ConnectionManager,
    mut requests: mpsc::UnboundedReceiver<String>,
    shared: Weak<Shared>,
    timeout: Duration,
) {
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
            let outcome =
                tokio::time::timeout(timeout, connection.subscribe(&plan.subscribe)).await;
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
            let _ = tokio::time::timeout(timeout, connection.unsubscribe(&plan.unsubscribe)).await;
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

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
