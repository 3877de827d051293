//! Watching a Redlock lock's holder.
//!
//! Each master publishes the changes of its own copy of the lock on the
//! holder channel while the lock's watchers' marker exists there (see
//! [`watch`](crate::watch)). A Redlock watch subscribes the channel on
//! every master, sets the marker on every master, then reads the holder a
//! majority agrees on (as `inspect` does). Any message from any master
//! makes it read that majority view again; so does a broken connection,
//! the end of the holder's lease (expiry publishes nothing), and the
//! marker falling due.
//!
//! What it guarantees: every state it reports is a majority view read
//! after the change that produced it, so it never reports a holder no
//! majority had; a change of holder or value that a majority applied is
//! reported (with the state after it) as long as at least `N − quorum + 1`
//! masters are subscribed and marked, which the read checks — every
//! majority shares a master with those. Changes that follow each other
//! faster than a read may be reported as their end state only, and the
//! token the watch reports for one holder never decreases (a read that
//! catches a holder before every master stamped its token keeps the
//! larger one seen).

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use futures_util::future::join_all;
use lock_core::backend::{Change, HolderSource};
use lock_core::{LockError, LockInfo, LockName};

use super::core::RedlockCore;
use crate::keys::LockKeys;
use crate::pubsub::{HolderEvent, HolderEvents, Listening};
use crate::watch::WATCHED_FOR;

/// One watch of one Redlock lock.
pub(super) struct RedlockWatch {
    core: Arc<RedlockCore>,
    name: LockName,
    keys: LockKeys,
    events: Option<HolderEvents>,
    lease_end: Option<Instant>,
    rearm_at: Instant,
    /// The last holder reported.
    last: Option<LockInfo>,
}

impl RedlockWatch {
    /// A watch of `name` on `core`'s masters. No network traffic.
    pub(super) fn new(core: Arc<RedlockCore>, name: LockName) -> Self {
        Self {
            keys: core.keys(&name),
            core,
            name,
            events: None,
            lease_end: None,
            rearm_at: Instant::now(),
            last: None,
        }
    }

    /// Subscribes the holder channel and sets the marker on every master;
    /// how many masters have both.
    async fn arm(&mut self) -> usize {
        let core = &self.core;
        let all: Vec<usize> = (0..core.nodes.len()).collect();
        let events = self
            .events
            .get_or_insert_with(|| core.listener.holder_events(&all, self.keys.holder()));
        events.clear();
        let marked_for = WATCHED_FOR.as_millis() as u64;
        let mut mark = redis::cmd("SET");
        mark.arg(self.keys.watched())
            .arg("1")
            .arg("PX")
            .arg(marked_for);
        // Both must be in place before the read; neither needs the other.
        let (subscribed, marks) = tokio::join!(
            core.listener.ensure_on(&all, self.keys.holder()),
            join_all(
                core.nodes
                    .iter()
                    .map(|node| node.query::<()>(core.timeouts, "watch", &mark)),
            )
        );
        subscribed
            .iter()
            .zip(&marks)
            .filter(|(s, m)| **s != Listening::Unavailable && m.is_ok())
            .count()
    }
}

#[async_trait]
impl HolderSource for RedlockWatch {
    async fn read(&mut self) -> Result<Option<LockInfo>, LockError> {
        let core = &self.core;
        let n = core.nodes.len();
        let needed = n - core.quorum + 1;
        let started = Instant::now();
        let armed = self.arm().await;
        if armed < needed {
            return Err(LockError::Unavailable {
                message: format!(
                    "Redlock watch: {armed} of {n} masters subscribed and marked; {needed} needed"
                ),
                source: None,
            });
        }
        let mut holder = self.core.holder(&self.name).await?;
        let now = Instant::now();
        self.rearm_at = started + WATCHED_FOR / 3;
        self.lease_end = holder.as_ref().and_then(|h| h.ttl_left).map(|t| now + t);
        if let (Some(holder), Some(last)) = (holder.as_mut(), self.last.as_ref()) {
            if holder.owner == last.owner && holder.token < last.token {
                holder.token = last.token;
            }
        }
        self.last.clone_from(&holder);
        Ok(holder)
    }

    async fn next_change(&mut self) -> Result<Change, LockError> {
        let wake_at = self
            .lease_end
            .map_or(self.rearm_at, |end| end.min(self.rearm_at));
        let Some(events) = self.events.as_mut() else {
            return Ok(Change::Reread);
        };
        tokio::select! {
            event = events.next() => match event {
                None => Err(LockError::Unavailable {
                    message: "Redlock watch: the backend is gone".into(),
                    source: None,
                }),
                // A change on some master, or a lost connection: read the
                // majority view again (the read drops what queued up).
                Some(HolderEvent::Message(_) | HolderEvent::Missed) => Ok(Change::Reread),
            },
            () = tokio::time::sleep_until(wake_at.into()) => Ok(Change::Reread),
        }
    }
}
