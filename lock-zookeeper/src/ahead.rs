//! What a waiter watches in the queue: the node just ahead of it, its
//! predecessor, and nothing else (no herd: a release wakes one waiter).
//!
//! The predecessor's deletion only means "we hold the lock" if the
//! predecessor held it. A waiter that gives up deletes its node too, while
//! others may still be ahead; listing the queue again after every deletion
//! would put a round trip between every release and the next holder. Only
//! a holder ever writes its node: to replace its value (see
//! [`crate::value`]), and to mark it as it releases it, in one transaction
//! with its deletion (see [`crate::held`]). So a waiter that sees its
//! predecessor's data change knows the predecessor held the lock, and that
//! nobody is ahead of it any more once that node is gone: it then holds
//! the lock with no request in between. Sequence numbers only grow, so
//! nobody can have queued ahead of it meanwhile.
//!
//! A waiter whose latest listing showed its predecessor at the head of the
//! queue needs no mark: it watches only for the predecessor's deletion,
//! with a child watch (which the predecessor's value changes do not fire;
//! a contender node has no children). A waiter further back also watches
//! the predecessor's data, in the same round trip; a plain deletion with no
//! data change before it (a waiter giving up, a session ending, a lock
//! taken away) makes it list the queue again.
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

/// Watches the node `ahead` names and waits until it goes, or our own
/// node goes (`own`); see the module documentation.
pub(crate) async fn wait(
    session: &Session,
    dir: &str,
    ahead: Ahead<'_>,
    own: &NodeWatch,
) -> Result<Next, LockError> {
    let path = format!("{dir}/{}", ahead.predecessor);
    let client = session.client();
    // Both requests are sent here, in this order, before either is awaited.
    let deletion = session.request(client.list_and_watch_children(&path));
    let (deletion, change) = if ahead.at_head {
        (deletion.await, None)
    } else {
        let change = session.request(client.check_and_watch_stat(&path));
        let (deletion, change) = tokio::join!(deletion, change);
        (deletion, Some(change))
    };
    let mut held = ahead.at_head;
    let deletion = match deletion {
        Ok((_, watcher)) => watcher,
        Err(ZkError::NoNode) => return Ok(if held { Next::Hold } else { Next::Relist }),
        Err(e) => return Err(error::map(&format!("watch {path}"), e)),
    };
    let mut change = match change {
        None => None,
        Some(Ok((Some(_), watcher))) => Some(watcher),
        // Deleted between the two requests, with nothing seen in between.
        Some(Ok((None, _))) => return Ok(Next::Relist),
        Some(Err(e)) => return Err(error::map(&format!("watch {path}"), e)),
    };
    let deleted = deletion.changed();
    tokio::pin!(deleted);
    loop {
        let watching_change = change.is_some();
        let changed = async {
            match change.take() {
                Some(watcher) => watcher.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // A release's mark and its deletion arrive together: the mark
            // must be seen first.
            biased;
            event = changed, if watching_change => match outcome(&event)? {
                Some(EventType::NodeDataChanged) => held = true,
                Some(EventType::NodeDeleted) => {}
                _ => return Ok(Next::Relist),
            },
            event = &mut deleted => {
                return match outcome(&event)? {
                    Some(EventType::NodeDeleted) if held => Ok(Next::Hold),
                    _ => Ok(Next::Relist),
                };
            }
            () = own.gone() => return Ok(Next::Relist),
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
