//! One server's pub/sub connection: registering interest in its
//! channels, making sure they are subscribed, and the dispatch of the
//! server's push messages.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lock_core::backend::WakeRegistry;
use lock_core::url::HostPort;
use lock_core::LockError;
use redis::aio::{AsyncPushSender, ConnectionManager, SendError};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::channels::{Interest, NodeChannels, Subscription};
use super::events::EventSender;
use super::worker;
use crate::client;
use crate::config::RedisConfig;
use crate::deadline::Timeouts;
use crate::grants::{parse_grant, GrantBoard};
use crate::sentinel::MasterLink;

/// Which server one pub/sub connection listens to.
#[derive(Clone)]
pub(crate) enum Target {
    /// This server, always.
    Fixed(HostPort),
    /// The master Redis Sentinel names: the connection moves whenever
    /// the link does.
    Following(Arc<MasterLink>),
}

/// What [`Listener::ensure_listening`](super::Listener::ensure_listening)
/// found.
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

/// One server's pub/sub connection and its channel states.
#[derive(Debug)]
pub(super) struct NodeListener {
    channels: Arc<NodeChannels>,
}

impl NodeListener {
    /// Starts the worker of `target`'s connection, with `config`'s
    /// credentials and TLS; it connects on first use.
    pub(super) fn start(
        config: &RedisConfig,
        target: &Target,
        registry: WakeRegistry,
        grants: GrantBoard,
    ) -> Result<Self, LockError> {
        let (todo, requests) = mpsc::unbounded_channel();
        let channels = Arc::new(NodeChannels::new(todo, registry, grants));
        if config.tls.is_some() {
            client::install_crypto_provider();
        }
        let open = Opener {
            config: config.clone(),
            channels: Arc::downgrade(&channels),
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
            Arc::downgrade(&channels),
            Timeouts::new(config).overall,
        ));
        Ok(Self { channels })
    }

    /// Registers interest in `channel` (and, for a watcher, where its
    /// messages go). No network traffic.
    pub(super) fn interest(&self, channel: &str, watcher: Option<EventSender>) -> Interest {
        self.channels.interest(channel, watcher)
    }

    /// Makes sure `channel` is subscribed, waiting at most `timeout` for
    /// the worker; the caller holds an interest in it.
    pub(super) async fn ensure(&self, channel: &str, timeout: Duration) -> Listening {
        let mut state = {
            let mut entries = self.channels.entries();
            let Some(entry) = entries.get_mut(channel) else {
                return Listening::Unavailable;
            };
            // Copied out: the borrow holds the watch's read lock.
            let current = *entry.state.borrow();
            match current {
                Subscription::Active => return Listening::Already,
                Subscription::Pending => {}
                Subscription::Inactive | Subscription::Stale | Subscription::Failed => {
                    entry.state.send_replace(Subscription::Pending);
                    let _ = self.channels.todo.send(channel.to_owned());
                }
            }
            entry.state.subscribe()
        };
        let settled = async move {
            state
                .wait_for(|s| !matches!(s, Subscription::Pending | Subscription::Inactive))
                .await
                .map(|s| *s)
        };
        match tokio::time::timeout(timeout, settled).await {
            Ok(Ok(Subscription::Active)) => Listening::Now,
            _ => Listening::Unavailable,
        }
    }
}

/// Opens pub/sub connections that hand their push messages to one
/// server's [`NodeChannels`].
struct Opener {
    config: RedisConfig,
    channels: Weak<NodeChannels>,
}

impl Opener {
    /// A connection to `node` (made on first use) that resubscribes by
    /// itself after a reconnect.
    fn connection(&self, node: &HostPort) -> Result<ConnectionManager, LockError> {
        let manager_config = client::manager_config(&self.config)
            .set_push_sender(Dispatch(self.channels.clone()))
            .set_automatic_resubscription();
        let client = client::client(&self.config, node)?;
        ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|e| LockError::invalid_config(format!("Redis pub/sub at {node}: {e}")))
    }
}

/// Receives the server's push messages: a hand-off wakes its waiter, a
/// holder channel's message goes to its watchers, a release wakes the
/// channel's waiters, at once; a disconnect wakes everyone (messages may
/// be lost until the subscriptions are restored).
struct Dispatch(Weak<NodeChannels>);

impl AsyncPushSender for Dispatch {
    fn send(&self, info: PushInfo) -> Result<(), SendError> {
        let Some(channels) = self.0.upgrade() else {
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
                if channels.to_watchers(channel, payload) {
                    return Ok(());
                }
                match parse_grant(payload) {
                    Some((token, owner)) => {
                        channels.grants.offer(owner, token);
                    }
                    None => {
                        channels.registry.wake(channel);
                    }
                }
            }
            PushKind::Disconnection => channels.disconnected(),
            _ => {}
        }
        Ok(())
    }
}
