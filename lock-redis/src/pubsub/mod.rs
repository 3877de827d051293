//! Notifications: one pub/sub connection per server, shared by all
//! waiters and watchers of a backend.
//!
//! Three kinds of messages arrive: `"granted <token> <owner>"`, a hand-off
//! to one queued waiter of this backend (see [`grants`](crate::grants)),
//! published on the backend's own grant channel and waking that waiter
//! alone; `"released"` on a lock's release channel (Redlock, whose masters
//! keep no queue), which wakes every local waiter of that lock; and the
//! messages of a lock's holder channel (see [`watch`](crate::watch)),
//! handed with their payload, in order, to that lock's local watchers.
//! Waiters and watchers never share a channel: a watched lock's acquires
//! wake no waiter, and a lock nobody watches publishes nothing.
//!
//! A waiter registers interest in its lock's channel ([`Listener::watch`])
//! without any network traffic. Only when an attempt finds the lock held
//! does it make sure the channel is subscribed ([`Listener::ensure_listening`]);
//! uncontended locks never touch pub/sub. A worker task owns the
//! connection and reconciles the server's subscriptions with local
//! interest in batches: it subscribes channels someone waits on and
//! unsubscribes a channel once nobody has waited on it for
//! [`LINGER`](channels::LINGER) (so a hot key is not unsubscribed and
//! subscribed again between two waits).
//!
//! The connection is a RESP3 [`ConnectionManager`](redis::aio::ConnectionManager)
//! with automatic resubscription: after a reconnect the server's
//! subscriptions are restored. Messages published meanwhile are lost, so
//! on a disconnect every waiter is woken to try again (waits are bounded
//! by the holder's remaining lease anyway), every watcher is told to read
//! again, and every channel counts as unconfirmed until a subscription on
//! the new connection succeeds ([`Listener::ensure_listening`] sends one).
//! A watcher that does not keep up (more than 1,024 messages queued) is
//! told it missed some, like after a disconnect, and reads again.

mod channels;
mod events;
mod node;
mod worker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use lock_core::backend::{WakeRegistry, WakeSubscription};
use lock_core::url::HostPort;
use lock_core::{LockError, OwnerId};
use tokio::sync::mpsc;

use crate::config::RedisConfig;
use crate::deadline::Timeouts;
use crate::grants::{GrantBoard, GrantTicket};
use channels::Interest;
use events::EventSender;
use node::NodeListener;

pub(crate) use events::HolderEvent;
pub(crate) use node::{Listening, Target};

/// How many messages a watcher that does not keep up may have queued;
/// beyond that, it is told that it missed some and reads again.
const WATCHER_QUEUE: usize = 1024;

/// A watcher's registration on a holder channel, on some servers; the
/// events of all of them arrive on one queue. Dropping it stops the
/// delivery (and, after [`LINGER`](channels::LINGER), the subscription).
#[derive(Debug)]
pub(crate) struct HolderEvents {
    events: mpsc::Receiver<HolderEvent>,
    overflowed: Arc<AtomicBool>,
    _interests: Vec<Interest>,
}

impl HolderEvents {
    /// The next event; `None` once the backend is gone.
    pub(crate) async fn next(&mut self) -> Option<HolderEvent> {
        if self.overflowed.swap(false, Ordering::SeqCst) {
            return Some(HolderEvent::Missed);
        }
        self.events.recv().await
    }

    /// Drops the events received so far: a read follows, which they are
    /// older than.
    pub(crate) fn clear(&mut self) {
        self.overflowed.store(false, Ordering::SeqCst);
        while self.events.try_recv().is_ok() {}
    }
}

/// Notifications from one or more servers (several for Redlock and a
/// cluster), all waking the same [`WakeRegistry`].
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
        let targets: Vec<Target> = nodes.iter().cloned().map(Target::Fixed).collect();
        Self::on(config, &targets)
    }

    /// A listener over `targets`, with `config`'s credentials and TLS;
    /// connects on first use.
    pub(crate) fn on(config: &RedisConfig, targets: &[Target]) -> Result<Self, LockError> {
        let registry = WakeRegistry::new();
        let grants = GrantBoard::new(registry.clone());
        let nodes = targets
            .iter()
            .map(|target| NodeListener::start(config, target, registry.clone(), grants.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let grant_channel = format!("distlock:grants:{}", OwnerId::generate());
        let grant_interest = nodes
            .iter()
            .map(|n| n.interest(&grant_channel, None))
            .collect();
        Ok(Self {
            registry,
            grants,
            grant_channel: grant_channel.into(),
            _grant_interest: Arc::new(grant_interest),
            nodes: Arc::new(nodes),
            timeout: Timeouts::new(config).overall,
        })
    }

    /// Registers interest in `channel`'s releases. No network traffic.
    pub(crate) fn watch(&self, channel: &str) -> WakeSubscription {
        let interests: Vec<Interest> = self
            .nodes
            .iter()
            .map(|n| n.interest(channel, None))
            .collect();
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

    /// How many servers this listener listens to.
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Registers a watcher of the holder channel `channel` on the servers
    /// `nodes` (indices, below [`node_count`](Self::node_count)). No
    /// network traffic: [`ensure_on`](Self::ensure_on) subscribes.
    pub(crate) fn holder_events(&self, nodes: &[usize], channel: &str) -> HolderEvents {
        let (queue, events) = mpsc::channel(WATCHER_QUEUE);
        let overflowed = Arc::new(AtomicBool::new(false));
        let sender = EventSender {
            queue,
            overflowed: Arc::clone(&overflowed),
        };
        let interests = nodes
            .iter()
            .map(|&i| self.nodes[i].interest(channel, Some(sender.clone())))
            .collect();
        HolderEvents {
            events,
            overflowed,
            _interests: interests,
        }
    }

    /// Makes sure `channel` is subscribed on every server, for a caller
    /// holding a [`watch`](Self::watch) subscription on it.
    pub(crate) async fn ensure_listening(&self, channel: &str) -> Listening {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let results = self.ensure_on(&all, channel).await;
        if results.contains(&Listening::Now) {
            Listening::Now
        } else if results.contains(&Listening::Already) {
            Listening::Already
        } else {
            Listening::Unavailable
        }
    }

    /// Makes sure `channel` is subscribed on the servers `nodes`, each by a
    /// subscription the server confirmed since that connection last broke;
    /// what each found, in the order of `nodes`. The caller holds an
    /// interest in the channel on those servers.
    pub(crate) async fn ensure_on(&self, nodes: &[usize], channel: &str) -> Vec<Listening> {
        join_all(
            nodes
                .iter()
                .map(|&i| self.nodes[i].ensure(channel, self.timeout)),
        )
        .await
    }
}
