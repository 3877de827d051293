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
//! Readers (`read-` nodes, see [`crate::names`]) share the queue: a reader
//! waits only for exclusive nodes, so it watches the nearest exclusive
//! node ahead of it, by the same rules (that node's data changes only
//! while it holds, and once a holder is gone nobody exclusive is ahead
//! any more). An exclusive waiter behind a reader watches that reader,
//! but a reader's data change says nothing (readers hold side by side and
//! never mark their release), so unless it was at the head, its deletion
//! makes the waiter list again.
//!
//! Whoever may write lock nodes could fake a release this way; the ACLs
//! lock nodes get give that right to exactly those who may delete them,
//! including the holder's, so this trusts nobody new. Tokens stay fenced
//! either way: the new holder's czxid is above the old one's.

use lock_core::LockError;
use zookeeper_client::{Error as ZkError, EventType, WatchedEvent};

use crate::acquire::Next;
use crate::error;
use crate::names::{NodeKind, NodeName};
use crate::session::Session;
use crate::watch::NodeWatch;

/// The node just ahead of us in the latest listing.
pub(crate) struct Ahead<'a> {
    /// Its name in the contenders directory.
    pub predecessor: &'a str,
    /// Whether it was at the head of the queue: then its deletion, marked
    /// or not, leaves nobody ahead of us.
    pub at_head: bool,
    /// Whether a change of its data means it held the lock: true for an
    /// exclusive node, false for a reader.
    pub marks: bool,
}

/// What keeps our node (sequence `me`, a reader if `shared`) from the lock
/// in the queue `nodes` (sorted, as [`crate::names::queue`] returns it):
/// `None` if nothing does. An exclusive node waits for every node ahead of
/// it and watches the one just ahead; a reader waits only for exclusive
/// nodes and watches the nearest one.
pub(crate) fn blocking<'a>(nodes: &[NodeName<'a>], me: i64, shared: bool) -> Option<Ahead<'a>> {
    let ahead = nodes.iter().take_while(|n| n.sequence < me);
    let predecessor = if shared {
        ahead.filter(|n| n.kind == NodeKind::Exclusive).last()?
    } else {
        ahead.last()?
    };
    Some(Ahead {
        predecessor: predecessor.name,
        at_head: nodes.first().map(|n| n.sequence) == Some(predecessor.sequence),
        marks: predecessor.kind == NodeKind::Exclusive,
    })
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
    // Only an exclusive node's data change tells anything (see above).
    let (deletion, change) = if ahead.at_head || !ahead.marks {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::queue;

    fn listing(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn readers_wait_for_writers_only_and_writers_for_everyone() {
        let children = listing(&["read-a-1", "lock-b-2", "read-c-3", "read-d-4", "lock-e-5"]);
        let nodes = queue(&children);
        assert!(blocking(&nodes, 1, true).is_none(), "first reader holds");
        let writer = blocking(&nodes, 2, false).unwrap();
        assert_eq!(
            (writer.predecessor, writer.at_head, writer.marks),
            ("read-a-1", true, false)
        );
        let reader = blocking(&nodes, 4, true).unwrap();
        assert_eq!(
            (reader.predecessor, reader.at_head, reader.marks),
            ("lock-b-2", false, true)
        );
        let last = blocking(&nodes, 5, false).unwrap();
        assert_eq!(
            (last.predecessor, last.at_head, last.marks),
            ("read-d-4", false, false)
        );
        let two = listing(&["read-a-1", "read-c-3"]);
        let readers = queue(&two);
        assert!(blocking(&readers, 3, true).is_none(), "readers share");
        assert!(blocking(&readers, 3, false).is_some());
    }
}
