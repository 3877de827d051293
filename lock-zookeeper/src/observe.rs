//! Watching a lock's holder ([`Backend::watch`](lock_core::backend::Backend::watch)):
//! one ZooKeeper watch at a time, on the node that decides what changes
//! next.
//!
//! * The lock is held: a data watch on the holder's node (the lowest
//!   contender). It fires when the holder replaces its value and when the
//!   node goes (released, session ended, taken away), which are the only
//!   ways the holder can change: nobody can queue ahead of the lowest
//!   sequence number. Waiters joining or leaving behind the holder wake
//!   nobody.
//! * The lock is free: a child watch on the contenders directory, which
//!   fires when a contender enters.
//! * The directory does not exist: an exists watch on it, which fires when
//!   it is created.
//!
//! ZooKeeper watches carry no state, so every notification is a
//! [`Change::Reread`]: the read that follows re-arms the watch and reads
//! the holder. A holder that came and went between a notification and that
//! read is not seen.
//!
//! A reread after a notification costs one round trip: a value change
//! reads the same node again; a holder gone reads the contenders that
//! queued behind it, as last listed, in order (nobody can queue ahead of
//! them: sequence numbers only grow), so the first one still there is the
//! new holder. Only when none is left is the directory listed again.
//!
//! Watches survive a lost connection: the client sets them again when it
//! reconnects, and the server fires those whose node changed meanwhile.
//! Only the end of the session reaches a watch as such; it is returned as
//! an error, and the next read opens a new session (through [`Sessions`]).
//! A read through a session for the first time, or after an error, first
//! makes its server catch up with the leader, so that a fresh session on a
//! lagging server cannot report an older holder (tokens never go
//! backwards; a read that would is refused and retried).
//!
//! A persistent recursive watch on the directory would report every
//! contender's changes in order, but not their data: a holder gone before
//! its data is read would be missed all the same, while every waiter's
//! arrival and departure would cost the watcher a notification.
//!
//! Dropping the watch drops its armed watcher, which removes it from the
//! server.

use std::sync::{Arc, Weak};

use lock_core::backend::{async_trait, Change, HolderSource};
use lock_core::{LockError, LockInfo};
use zookeeper_client::{Error as ZkError, EventType, OneshotWatcher, SessionState};

use crate::error;
use crate::holders::RACE_RETRIES;
use crate::layout::Layout;
use crate::session::Session;
use crate::sessions::Sessions;

/// The holder of one lock, as a [`HolderSource`]; see the module docs.
pub(crate) struct HolderNodes {
    sessions: Arc<Sessions>,
    /// The lock's contenders directory.
    dir: String,
    /// How its nodes are named and read.
    layout: Layout,
    /// The watch the last read set.
    armed: Option<OneshotWatcher>,
    /// The session the last read went through.
    session: Weak<Session>,
    /// Whether the next read first syncs its server with the leader.
    sync: bool,
    /// Whether the last read found the lock free: the next one then lists
    /// the directory with a watch at once.
    free: bool,
    /// The highest token reported so far.
    last_token: u64,
    /// The holder's node, when the last read found the lock held.
    holder: Option<String>,
    /// The contenders queued behind the holder at the last listing, in order.
    behind: Vec<String>,
    /// What the last notification said about the holder's node.
    hint: Hint,
}

/// What the notification that ended the last wait says about the holder's
/// node, so the next read can skip the listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hint {
    /// Nothing known: list the directory.
    None,
    /// The holder's value changed: read its node again.
    ValueChanged,
    /// The holder's node is gone: read the contenders behind it.
    HolderGone,
}

impl Drop for HolderNodes {
    fn drop(&mut self) {
        // The armed watcher goes first, while `sessions` still keeps its
        // session open: its removal then precedes the session's close
        // (see `crate::session`).
        self.armed.take();
    }
}

impl HolderNodes {
    /// Watches the lock whose contenders directory is `dir`, its nodes
    /// named as `layout` names them, through the backend's sessions.
    pub(crate) fn new(sessions: Arc<Sessions>, dir: String, layout: Layout) -> Self {
        Self {
            sessions,
            dir,
            layout,
            armed: None,
            session: Weak::new(),
            sync: true,
            free: false,
            last_token: 0,
            holder: None,
            behind: Vec::new(),
            hint: Hint::None,
        }
    }

    async fn read_through(
        &mut self,
        session: &Arc<Session>,
    ) -> Result<Option<LockInfo>, LockError> {
        if self.sync || !Weak::ptr_eq(&self.session, &Arc::downgrade(session)) {
            session
                .request(session.client().sync("/"))
                .await
                .map_err(|e| error::map("sync with the leader", e))?;
            self.session = Arc::downgrade(session);
            self.sync = false;
        }
        for _ in 0..RACE_RETRIES {
            let Some(holder) = self.look(session).await? else {
                continue;
            };
            if let Some(info) = &holder {
                let token = info.token.get();
                if token < self.last_token {
                    self.armed = None;
                    return Err(LockError::Unavailable {
                        message: format!(
                            "a ZooKeeper server reported the holder of {} with token {token}, \
                             older than {} seen before",
                            self.dir, self.last_token
                        ),
                        source: None,
                    });
                }
                self.last_token = token;
            }
            return Ok(holder);
        }
        Err(LockError::Unavailable {
            message: format!("the holder of {} kept changing while being read", self.dir),
            source: None,
        })
    }

    /// Reads the holder and arms the watch for the next change; `None`
    /// when the queue changed under the reads (look again).
    async fn look(&mut self, session: &Session) -> Result<Option<Option<LockInfo>>, LockError> {
        let hint = std::mem::replace(&mut self.hint, Hint::None);
        if let Some(holder) = self.follow(session, hint).await? {
            return Ok(Some(Some(holder)));
        }
        let client = session.client();
        let dir = &self.dir;
        let listed = if self.free {
            let listing = session.request(client.list_and_watch_children(dir)).await;
            listing.map(|(children, watcher)| (children, Some(watcher)))
        } else {
            let listing = session.request(client.list_children(dir)).await;
            listing.map(|children| (children, None))
        };
        let (children, dir_watch) = match listed {
            Ok(listed) => listed,
            Err(ZkError::NoNode) => return self.watch_creation(session).await,
            Err(e) => return Err(error::map(&format!("list {dir}"), e)),
        };
        let Some(first) = self.layout.queue(&children).into_iter().next() else {
            self.free = true;
            // Without a watch yet: list again, with one.
            return Ok(dir_watch.map(|watcher| {
                self.armed = Some(watcher);
                None
            }));
        };
        self.free = false;
        let path = format!("{dir}/{}", first.name);
        let behind = self
            .layout
            .queue(&children)
            .into_iter()
            .skip(1)
            .map(|node| node.name.to_owned())
            .collect();
        // Held: the directory's watch would only report waiters.
        drop(dir_watch);
        match self.read_holder(session, path).await? {
            Some(holder) => {
                self.behind = behind;
                Ok(Some(Some(holder)))
            }
            // Released between the listing and the read.
            None => Ok(None),
        }
    }

    /// Reads the holder without listing, where the notification allows:
    /// the same node after a value change, else the first contender still
    /// there among those queued behind it. `None`: list the directory.
    async fn follow(
        &mut self,
        session: &Session,
        hint: Hint,
    ) -> Result<Option<LockInfo>, LockError> {
        if hint == Hint::None || self.free {
            return Ok(None);
        }
        if hint == Hint::ValueChanged {
            if let Some(path) = self.holder.clone() {
                if let Some(holder) = self.read_holder(session, path).await? {
                    return Ok(Some(holder));
                }
            }
        }
        while !self.behind.is_empty() {
            let name = self.behind.remove(0);
            let path = format!("{}/{name}", self.dir);
            if let Some(holder) = self.read_holder(session, path).await? {
                return Ok(Some(holder));
            }
        }
        Ok(None)
    }

    /// Reads the node at `path` as the holder and watches it; `None` if it
    /// is gone.
    async fn read_holder(
        &mut self,
        session: &Session,
        path: String,
    ) -> Result<Option<LockInfo>, LockError> {
        match session
            .request(session.client().get_and_watch_data(&path))
            .await
        {
            Ok((data, stat, watcher)) => {
                self.armed = Some(watcher);
                let info = self.layout.holder_at(&path, &data, stat.czxid);
                self.holder = Some(path);
                Ok(Some(info))
            }
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(error::map(&format!("read {path}"), e)),
        }
    }

    /// The directory does not exist: watch for its creation.
    async fn watch_creation(
        &mut self,
        session: &Session,
    ) -> Result<Option<Option<LockInfo>>, LockError> {
        let client = session.client();
        match session
            .request(client.check_and_watch_stat(&self.dir))
            .await
        {
            Ok((None, watcher)) => {
                self.free = true;
                self.armed = Some(watcher);
                Ok(Some(None))
            }
            // Created meanwhile.
            Ok((Some(_), _)) => Ok(None),
            Err(e) => Err(error::map(&format!("watch {}", self.dir), e)),
        }
    }
}

#[async_trait]
impl HolderSource for HolderNodes {
    async fn read(&mut self) -> Result<Option<LockInfo>, LockError> {
        // Dropping the previous watcher removes its watch, if it never fired.
        self.armed = None;
        let read = match self.sessions.get().await {
            Ok(session) => self.read_through(&session).await,
            Err(e) => Err(e),
        };
        if read.is_err() {
            self.sync = true;
            self.hint = Hint::None;
        }
        read
    }

    async fn next_change(&mut self) -> Result<Change, LockError> {
        let Some(watcher) = self.armed.take() else {
            return Ok(Change::Reread);
        };
        let event = watcher.changed().await;
        if event.event_type == EventType::Session {
            // Only the end of the session reaches a one-shot watch.
            self.sync = true;
            let ended = match event.session_state {
                SessionState::AuthFailed => ZkError::AuthFailed,
                SessionState::Closed => ZkError::ClientClosed,
                _ => ZkError::SessionExpired,
            };
            return Err(error::map(&format!("watch {}", self.dir), ended));
        }
        self.hint = match event.event_type {
            EventType::NodeDataChanged if !self.free => Hint::ValueChanged,
            EventType::NodeDeleted if !self.free => Hint::HolderGone,
            _ => Hint::None,
        };
        Ok(Change::Reread)
    }
}
