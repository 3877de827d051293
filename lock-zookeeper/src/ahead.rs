//! What a waiter watches in the queue: the node just ahead of it (its
//! predecessor) and, while that node is not yet at the head, the node ahead
//! of the predecessor.
//!
//! The predecessor's deletion is what a waiter waits for. It only means
//! "we hold the lock" if the predecessor was at the head of the queue;
//! otherwise it may have given up while others are still ahead, and the
//! waiter has to list the queue again. Doing that listing when the
//! predecessor goes puts a round trip between every release and the next
//! holder. So a waiter also watches the node two ahead: when that one goes,
//! the predecessor has most likely just taken the lock, and the waiter
//! lists the queue while the predecessor holds. Seeing the predecessor at
//! the head then, the waiter holds the lock on the predecessor's deletion
//! with no request in between.
//!
//! Each node is watched by at most the two waiters right behind it, so a
//! release still wakes one waiter, not the queue (no herd). The
//! predecessor's watch is kept across listings that show the same
//! predecessor, so it is set once per predecessor.

use std::future::Future;
use std::pin::Pin;

use lock_core::LockError;
use zookeeper_client::{Error as ZkError, EventType, OneshotWatcher, WatchedEvent};

use crate::error;
use crate::session::Session;
use crate::watch::NodeWatch;

/// The event of a one-shot watch, kept across listings.
type Pending = Pin<Box<dyn Future<Output = WatchedEvent> + Send>>;

/// A watch on one node of the queue.
struct Watched {
    /// The node's name in the contenders directory.
    name: String,
    event: Pending,
}

impl Watched {
    fn new(name: &str, watcher: OneshotWatcher) -> Self {
        Self {
            name: name.to_owned(),
            event: Box::pin(watcher.changed()),
        }
    }
}

/// The nodes ahead of us in the latest listing, as [`AheadWatch::wait`]
/// needs them.
pub(crate) struct Ahead<'a> {
    /// The node just ahead of us.
    pub predecessor: &'a str,
    /// The node ahead of the predecessor, if any: `None` means the
    /// predecessor is at the head of the queue.
    pub second: Option<&'a str>,
}

/// What to do after [`AheadWatch::wait`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The predecessor, at the head of the queue, is gone: the lock is ours.
    Hold,
    /// The queue changed in a way that needs a fresh listing.
    Relist,
}

/// The watches of one waiter; see the module documentation.
#[derive(Default)]
pub(crate) struct AheadWatch {
    predecessor: Option<Watched>,
    second: Option<Watched>,
}

impl AheadWatch {
    /// Watches the nodes `ahead` names (reusing watches already set on
    /// them) and waits until the predecessor or the node ahead of it goes,
    /// or our own node does (`own`).
    pub(crate) async fn wait(
        &mut self,
        session: &Session,
        dir: &str,
        ahead: Ahead<'_>,
        own: &NodeWatch,
    ) -> Result<Next, LockError> {
        let client = session.client();
        let keep = |watched: &Option<Watched>, name: Option<&str>| matches!((watched, name), (Some(w), Some(name)) if w.name == name);
        if !keep(&self.predecessor, Some(ahead.predecessor)) {
            self.predecessor = None;
        }
        if !keep(&self.second, ahead.second) {
            self.second = None;
        }
        // Both watches are requested before either reply is awaited.
        let predecessor_path = format!("{dir}/{}", ahead.predecessor);
        let predecessor = self
            .predecessor
            .is_none()
            .then(|| session.request(client.check_and_watch_stat(&predecessor_path)));
        let second_path = ahead.second.map(|name| format!("{dir}/{name}"));
        let second = match (&self.second, &second_path) {
            (None, Some(path)) => Some(session.request(client.check_and_watch_stat(path))),
            _ => None,
        };
        let mut gone = false;
        if let Some(request) = predecessor {
            match request.await {
                Ok((Some(_), watcher)) => {
                    self.predecessor = Some(Watched::new(ahead.predecessor, watcher));
                }
                Ok((None, _)) if ahead.second.is_none() => return Ok(Next::Hold),
                Ok((None, _)) => gone = true,
                Err(e) => return Err(error::map(&format!("watch {predecessor_path}"), e)),
            }
        }
        if let (Some(request), Some(name), Some(path)) = (second, ahead.second, &second_path) {
            match request.await {
                Ok((Some(_), watcher)) => self.second = Some(Watched::new(name, watcher)),
                Ok((None, _)) => gone = true,
                Err(e) => return Err(error::map(&format!("watch {path}"), e)),
            }
        }
        if gone {
            return Ok(Next::Relist);
        }
        let Some(predecessor) = self.predecessor.as_mut() else {
            return Ok(Next::Relist);
        };
        let second = self.second.as_mut();
        let has_second = second.is_some();
        let second_event = async {
            match second {
                Some(watched) => watched.event.as_mut().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = predecessor.event.as_mut() => {
                self.predecessor = None;
                match outcome(&event)? {
                    Some(EventType::NodeDeleted) if ahead.second.is_none() => Ok(Next::Hold),
                    _ => Ok(Next::Relist),
                }
            }
            event = second_event, if has_second => {
                self.second = None;
                outcome(&event)?;
                Ok(Next::Relist)
            }
            () = own.gone() => Ok(Next::Relist),
        }
    }
}

/// The node event `event` reports, or an error if it reports the end of
/// the session.
fn outcome(event: &WatchedEvent) -> Result<Option<EventType>, LockError> {
    match event.event_type {
        EventType::Session if event.session_state.is_terminated() => {
            Err(error::map("wait for the lock", ZkError::SessionExpired))
        }
        EventType::Session => Ok(None),
        other => Ok(Some(other)),
    }
}
