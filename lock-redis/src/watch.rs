//! Watching a lock's holder on one instance or a cluster.
//!
//! Every script that changes a lock (acquire, hand-off, release, value
//! change, forced release) publishes the new state on the lock's holder
//! channel `distlock:{<ns>:<key>}:holder` — `"held <pttl> <lock value>"`
//! or `"free"` — but only while the lock's watchers' marker
//! `distlock:{<ns>:<key>}:watched` exists: a lock nobody watches costs one
//! `EXISTS` per change and publishes nothing. Expiry publishes nothing.
//!
//! A watch ([`RedisWatch`]) subscribes the holder channel on one server's
//! pub/sub connection (any node of a cluster: classic `PUBLISH` reaches
//! every node) and waits until the server confirmed the subscription.
//! Then one script sets the marker (for [`WATCHED_FOR`]), reads the lock
//! and publishes `"sync <nonce>"`. Messages before that sync describe
//! changes the read already saw and are skipped; every message after it
//! is a change after the read, in the order the server applied them, and
//! is reported as it says. The watch reads again when the holder's lease
//! runs out (expiry), every [`WATCHED_FOR`]/3 to keep its marker, after
//! the connection broke or it fell behind (messages may have been lost),
//! and when the sync does not arrive in time (it then tries the next node
//! of a cluster).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lock_core::backend::{Change, HolderSource};
use lock_core::{LockError, LockInfo, OwnerId};

use crate::conn::ScriptCall;
use crate::core::RedisCore;
use crate::keys::LockKeys;
use crate::pubsub::{HolderEvent, HolderEvents, Listening};
use crate::scripts::{parse_inspect, scripts};
use crate::value::{lock_info, parse_holder_message, HolderMessage};

/// How long a watcher's marker keeps a lock's changes published; each
/// watcher sets it again every third of that.
pub(crate) const WATCHED_FOR: Duration = Duration::from_secs(30);

/// One watch of one lock on an instance or a cluster.
pub(crate) struct RedisWatch {
    core: Arc<RedisCore>,
    keys: LockKeys,
    /// The server whose pub/sub connection carries the watch.
    node: usize,
    events: Option<HolderEvents>,
    /// The nonce of our last read's sync while it has not arrived, and
    /// when to give up waiting for it.
    sync: Option<(String, Instant)>,
    /// When the holder's lease runs out, if it is held.
    lease_end: Option<Instant>,
    /// When to set the marker again.
    rearm_at: Instant,
}

impl RedisWatch {
    /// A watch of the lock `keys` names. No network traffic.
    pub(crate) fn new(core: Arc<RedisCore>, keys: LockKeys) -> Self {
        Self {
            core,
            keys,
            node: 0,
            events: None,
            sync: None,
            lease_end: None,
            rearm_at: Instant::now(),
        }
    }

    /// Moves the watch to the next server (on a cluster, where the one it
    /// used does not deliver).
    fn next_node(&mut self) {
        self.events = None;
        self.node = (self.node + 1) % self.core.listener.node_count();
    }

    fn unavailable(&self, what: &str) -> LockError {
        LockError::Unavailable {
            message: format!("watch {}: {what}", self.keys.lock()),
            source: None,
        }
    }
}

#[async_trait]
impl HolderSource for RedisWatch {
    async fn read(&mut self) -> Result<Option<LockInfo>, LockError> {
        let listener = &self.core.listener;
        let events = self
            .events
            .get_or_insert_with(|| listener.holder_events(&[self.node], self.keys.holder()));
        // What came before this read is older than what it reads.
        events.clear();
        let subscribed = listener.ensure_on(&[self.node], self.keys.holder()).await;
        if subscribed.contains(&Listening::Unavailable) {
            self.next_node();
            return Err(self.unavailable("the holder channel could not be subscribed"));
        }
        let nonce = OwnerId::generate();
        let marked_for = WATCHED_FOR.as_millis() as u64;
        let sent = Instant::now();
        // Not run twice (not idempotent): a second run's sync would come
        // after changes that the first run's sync already let through.
        let reply: redis::Value = self
            .core
            .conn
            .eval(
                self.core.timeouts,
                &ScriptCall::new(
                    "watch",
                    &scripts().watch_read,
                    &self.keys.watched_lock(),
                    &[&marked_for, &nonce.as_str()],
                ),
            )
            .await?;
        let now = Instant::now();
        self.rearm_at = sent + WATCHED_FOR / 3;
        self.sync = Some((nonce.as_str().to_owned(), now + self.core.timeouts.overall));
        let holder = parse_inspect(reply).map(|(value, ttl_left)| lock_info(&value, ttl_left));
        self.lease_end = holder.as_ref().and_then(|h| h.ttl_left).map(|t| now + t);
        Ok(holder)
    }

    async fn next_change(&mut self) -> Result<Change, LockError> {
        loop {
            let sync_by = self.sync.as_ref().map(|(_, by)| *by);
            let wake_at = [self.lease_end, sync_by, Some(self.rearm_at)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(self.rearm_at);
            let Some(events) = self.events.as_mut() else {
                return Ok(Change::Reread);
            };
            let event = tokio::select! {
                event = events.next() => event,
                () = tokio::time::sleep_until(wake_at.into()) => {
                    if self.sync.as_ref().is_some_and(|(_, by)| *by <= Instant::now()) {
                        self.next_node();
                        return Err(self.unavailable("pub/sub delivered nothing in time"));
                    }
                    // The lease ran out (expiry publishes nothing), or the
                    // marker is due.
                    return Ok(Change::Reread);
                }
            };
            let payload = match event {
                None => return Err(self.unavailable("the backend is gone")),
                Some(HolderEvent::Missed) => return Ok(Change::Reread),
                Some(HolderEvent::Message(payload)) => payload,
            };
            let message = parse_holder_message(&payload);
            if let Some((nonce, _)) = &self.sync {
                // Older than our read, except our own sync, after which
                // every message is news.
                if matches!(message, Some(HolderMessage::Sync(n)) if n == nonce) {
                    self.sync = None;
                }
                continue;
            }
            match message {
                Some(HolderMessage::Held(holder)) => {
                    self.lease_end = holder.ttl_left.map(|t| Instant::now() + t);
                    return Ok(Change::Holder(Some(holder)));
                }
                Some(HolderMessage::Free) => {
                    self.lease_end = None;
                    return Ok(Change::Holder(None));
                }
                Some(HolderMessage::Sync(_)) => {}
                None => return Ok(Change::Reread),
            }
        }
    }
}
