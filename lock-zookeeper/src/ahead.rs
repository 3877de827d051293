//! What a waiter watches in the queue: the node just ahead of it, its
//! predecessor, and nothing else (no herd: a release wakes one waiter).
//!
//! The predecessor's deletion only means "we hold the lock" if the
//! predecessor held it. A waiter that gives up deletes its node too, while
//! others may still be ahead; listing the queue again after every deletion
//! would put a round trip between every release and the next holder. So a
//! holder releases by writing its node and deleting it in one transaction
//! (see [`crate::held`]). The write fires the waiter's watch as a data
//! change, which only a release by the holder produces: the waiter then
//! holds the lock with no request in between. Sequence numbers only grow,
//! so nobody can have queued ahead of it meanwhile. A plain deletion (a
//! waiter giving up, a session ending, a lock taken away) makes the waiter
//! list the queue again, unless its latest listing showed the predecessor
//! at the head: then the deletion alone leaves nobody ahead.
//!
//! Whoever may write lock nodes could fake a release this way; the ACLs
//! lock nodes get give that right to exactly those who may delete them,
//! including the holder's, so this trusts nobody new. Tokens stay fenced
//! either way: the new holder's czxid is above the old one's.

use lock_core::LockError;
use zookeeper_client::{Error as ZkError, EventType, WatchedEvent};

use crate::error;
use crate::session::Session;
use crate::watch::NodeWatch;

/// The node just ahead of us in the latest listing.
pub(crate) struct Ahead<'a> {
    /// Its name in the contenders directory.
    pub predecessor: &'a str,
    /// Whether it was at the head of the queue: then its deletion, marked
    /// or not, leaves nobody ahead of us.
    pub at_head: bool,
}

/// What to do after [`wait`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The predecessor released the lock it held: the lock is ours.
    Hold,
    /// The queue changed in a way that needs a fresh listing.
    Relist,
}

/// Watches the node `ahead` names and waits until it changes or goes, or
/// our own node goes (`own`); see the module documentation.
pub(crate) async fn wait(
    session: &Session,
    dir: &str,
    ahead: Ahead<'_>,
    own: &NodeWatch,
) -> Result<Next, LockError> {
    let deleted = if ahead.at_head {
        Next::Hold
    } else {
        Next::Relist
    };
    let path = format!("{dir}/{}", ahead.predecessor);
    let client = session.client();
    let watcher = match session.request(client.check_and_watch_stat(&path)).await {
        Ok((Some(_), watcher)) => watcher,
        Ok((None, _)) => return Ok(deleted),
        Err(e) => return Err(error::map(&format!("watch {path}"), e)),
    };
    tokio::select! {
        event = watcher.changed() => match outcome(&event)? {
            Some(EventType::NodeDataChanged) => Ok(Next::Hold),
            Some(EventType::NodeDeleted) => Ok(deleted),
            _ => Ok(Next::Relist),
        },
        () = own.gone() => Ok(Next::Relist),
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
