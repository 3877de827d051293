//! The LISTEN connection: one per backend, outside the pool (a
//! transaction-mode pooler cannot carry LISTEN), connected on the first
//! wait, to `listen_url` when given.
//!
//! A waiter [subscribes](Listener::subscribe) to its key's channel with
//! its own entry id. Every notification on a channel carries the id of an
//! entry that was deleted (negated) or changed (as it is); the waiter
//! whose predecessor (the
//! live entry right before it, [`Waiter::wait_behind`]) that is, is woken
//! — no herd: a release wakes the one waiter behind it. Ids ahead of a
//! waiter are remembered until its next check, so a notification arriving
//! between a check and the waiter naming its new predecessor is not lost.
//! A permit's waiter (and a watcher) is woken by any older entry's
//! notification instead ([`WokenBy::AnyOlder`]): any permit going may let
//! it in.
//!
//! A channel is LISTENed while it has waiters and UNLISTENed after its
//! last one leaves; both run on the connection under one async mutex, in
//! order. When the connection ends, every waiter is woken; before each
//! check of its queue a waiter calls [`Subscription::relisten`], which
//! reconnects if needed and LISTENs again, so no channel with waiters
//! stays unheard after a reconnection.
//!
//! A waiter whose re-check finds its predecessor gone without that
//! entry's notification having come reports a missed notification; the
//! second one makes the backend log one warning (behind a
//! transaction-mode pooler, notifications never come without
//! `listen_url`).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::future::poll_fn;
use lock_core::backend::spawn_detached;
use lock_core::LockError;
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, Client};

use crate::config::PgConfig;
use crate::connect;
use crate::errors::db_error;

/// At most this many ids remembered per waiter between two checks; past
/// it the waiter is simply woken.
const REMEMBERED: usize = 64;

/// The backend's LISTEN connection and who waits on which channel.
pub(crate) struct Listener {
    config: PgConfig,
    shared: Arc<Shared>,
    /// The connection's client and the channels LISTENed on it; LISTEN
    /// and UNLISTEN run under this, in order.
    link: tokio::sync::Mutex<Option<Link>>,
}

struct Link {
    client: Client,
    listening: HashSet<String>,
}

#[derive(Default)]
struct Shared {
    waiters: Mutex<HashMap<String, Vec<Arc<Waiter>>>>,
    next_id: AtomicU64,
    /// How often a waiter's predecessor went without its notification.
    missed: AtomicU64,
}

/// After this many notifications missed (one could still have been on its
/// way), the backend says once that they do not arrive.
const MISSED_BEFORE_WARNING: u64 = 2;

/// The entry id a watcher subscribes with (with [`WokenBy::AnyOlder`]):
/// it is woken by every notification on its channel.
pub(crate) const WATCHER: i64 = i64::MAX;

/// Which notifications wake a waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WokenBy {
    /// Only that of the entry it waits behind
    /// ([`Waiter::wait_behind`]): a lock's or a read lock's waiter, let in
    /// by that one entry going.
    EntryAhead,
    /// That of any entry older than its own: a permit's waiter (any older
    /// permit going may let it in) and a watcher.
    AnyOlder,
}

/// One waiting acquisition (or a watcher), as the notification side sees it.
pub(crate) struct Waiter {
    key: u64,
    /// Our entry id: only ids below it matter.
    entry: i64,
    woken_by: WokenBy,
    state: Mutex<WaitState>,
    wake: Notify,
}

#[derive(Default)]
struct WaitState {
    behind: Option<i64>,
    /// The notification of `behind` came (kept across checks while
    /// `behind` stays the same).
    heard: bool,
    seen: Vec<i64>,
    overflow: bool,
    /// An older entry was notified since the last check.
    older_notified: bool,
    /// Our own entry's deletion was notified.
    own_gone: bool,
}

impl Waiter {
    /// Forgets the ids seen so far: call just before checking the queue.
    pub(crate) fn start_check(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.seen.clear();
        state.overflow = false;
        state.older_notified = false;
    }

    /// Names the entry the check found right before ours. Returns true if
    /// its notification already came (check again at once).
    pub(crate) fn wait_behind(&self, ahead: i64) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let known = match self.woken_by {
            WokenBy::EntryAhead => state.overflow || state.seen.contains(&ahead),
            WokenBy::AnyOlder => state.older_notified,
        };
        if state.behind != Some(ahead) {
            state.heard = known;
        }
        state.behind = Some(ahead);
        known
    }

    /// The entry this waiter waits behind, if its notification has not
    /// come (yet).
    pub(crate) fn behind_unheard(&self) -> Option<i64> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.behind.filter(|_| !state.heard)
    }

    /// Resolves once the entry we wait behind is notified (or the
    /// connection ended).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Whether the entry this waiter waits behind was deleted after the
    /// last check (and ours was not): see [`Waiter::wait_behind`].
    pub(crate) fn behind_gone(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.heard && !state.own_gone
    }

    /// `id` was deleted (`gone`) or changed on our channel.
    fn notified(&self, id: i64, gone: bool) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if gone && id == self.entry {
            state.own_gone = true;
            self.wake.notify_one();
            return;
        }
        if id >= self.entry {
            return;
        }
        if self.woken_by == WokenBy::AnyOlder {
            state.heard |= state.behind == Some(id);
            state.older_notified = true;
            self.wake.notify_one();
            return;
        }
        // Waiting behind one entry: only its deletion lets us in.
        if !gone {
            return;
        }
        if state.behind == Some(id) {
            state.heard = true;
        }
        if state.seen.len() < REMEMBERED {
            state.seen.push(id);
        } else {
            state.overflow = true;
        }
        if state.behind == Some(id) || state.overflow {
            self.wake.notify_one();
        }
    }
}

/// A waiter's place on a channel; leaving it unsubscribes.
pub(crate) struct Subscription {
    listener: Weak<Listener>,
    channel: String,
    /// What the notification side wakes.
    pub(crate) waiter: Arc<Waiter>,
}

impl Subscription {
    /// Makes sure our channel is LISTENed on a live connection
    /// (reconnecting if it ended): call before each check of the queue.
    pub(crate) async fn relisten(&self) -> Result<(), LockError> {
        match self.listener.upgrade() {
            Some(listener) => listener.listen(&self.channel).await,
            None => Ok(()),
        }
    }
}

impl Listener {
    /// A listener that connects to `config` on first use.
    pub(crate) fn new(config: PgConfig) -> Self {
        Self {
            config,
            shared: Arc::default(),
            link: tokio::sync::Mutex::new(None),
        }
    }

    /// Registers a waiter with entry id `entry` on `channel`, woken as
    /// `woken_by` says, and makes
    /// sure the channel is LISTENed before returning, so every
    /// notification committed after this returns reaches the waiter.
    pub(crate) async fn subscribe(
        self: &Arc<Self>,
        channel: String,
        entry: i64,
        woken_by: WokenBy,
    ) -> Result<Subscription, LockError> {
        let waiter = Arc::new(Waiter {
            key: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            entry,
            woken_by,
            state: Mutex::default(),
            wake: Notify::new(),
        });
        {
            let mut waiters = self
                .shared
                .waiters
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            waiters
                .entry(channel.clone())
                .or_default()
                .push(Arc::clone(&waiter));
        }
        let subscription = Subscription {
            listener: Arc::downgrade(self),
            channel,
            waiter,
        };
        self.listen(&subscription.channel).await?;
        Ok(subscription)
    }

    /// Records that a waiter's predecessor went without its notification
    /// arriving (the re-check every `recheck` found it gone). The second
    /// time, says once in the log that notifications do not reach this
    /// connection, as behind a transaction-mode pooler.
    pub(crate) fn missed_notification(&self, recheck: Duration) {
        let missed = self.shared.missed.fetch_add(1, Ordering::Relaxed) + 1;
        if missed == MISSED_BEFORE_WARNING {
            tracing::warn!(
                ?recheck,
                "distlock: release notifications do not reach the LISTEN connection \
                 (a transaction-mode pooler such as PgBouncer in between?); waits end \
                 at the periodic re-check; set `listen_url` to the server itself"
            );
        }
    }

    /// LISTENs on `channel` unless it is already; reconnects first if the
    /// connection ended.
    async fn listen(&self, channel: &str) -> Result<(), LockError> {
        let mut link = self.link.lock().await;
        if link.as_ref().is_some_and(|l| l.client.is_closed()) {
            *link = None;
        }
        if link.is_none() {
            *link = Some(self.connect().await?);
        }
        let Some(link) = link.as_mut() else {
            return Ok(());
        };
        if link.listening.contains(channel) {
            return Ok(());
        }
        link.client
            .batch_execute(&format!("LISTEN \"{channel}\""))
            .await
            .map_err(|e| db_error("cannot LISTEN for releases", e))?;
        link.listening.insert(channel.to_owned());
        Ok(())
    }

    /// A new connection, driven by a task that hands its notifications to
    /// the waiters and wakes them all when it ends.
    async fn connect(&self) -> Result<Link, LockError> {
        let (client, mut connection) = connect::single(&self.config).await?;
        let shared = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        if let Ok(id) = n.payload().parse::<i64>() {
                            shared.dispatch(n.channel(), id.abs(), id < 0);
                        }
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%error, "distlock: the LISTEN connection failed");
                        break;
                    }
                }
            }
            if let Some(shared) = shared.upgrade() {
                shared.wake_all();
            }
        });
        Ok(Link {
            client,
            listening: HashSet::new(),
        })
    }

    /// UNLISTENs `channel` if nobody waits on it any more.
    async fn unlisten_if_unused(&self, channel: &str) {
        let mut link = self.link.lock().await;
        let unused = {
            let waiters = self
                .shared
                .waiters
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            !waiters.contains_key(channel)
        };
        let Some(link) = link.as_mut().filter(|_| unused) else {
            return;
        };
        if link.listening.remove(channel) {
            let sql = format!("UNLISTEN \"{channel}\"");
            if let Err(error) = link.client.batch_execute(&sql).await {
                tracing::debug!(%error, "distlock: UNLISTEN failed");
            }
        }
    }
}

impl Shared {
    fn dispatch(&self, channel: &str, id: i64, gone: bool) {
        let waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        for waiter in waiters.get(channel).into_iter().flatten() {
            waiter.notified(id, gone);
        }
    }

    fn wake_all(&self) {
        let waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        for waiter in waiters.values().flatten() {
            waiter.wake.notify_one();
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(listener) = self.listener.upgrade() else {
            return;
        };
        let last = {
            let mut waiters = listener
                .shared
                .waiters
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let list = waiters.entry(self.channel.clone()).or_default();
            list.retain(|w| w.key != self.waiter.key);
            let empty = list.is_empty();
            if empty {
                waiters.remove(&self.channel);
            }
            empty
        };
        if last {
            let channel = self.channel.clone();
            spawn_detached(None, async move {
                listener.unlisten_if_unused(&channel).await;
            });
        }
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}
