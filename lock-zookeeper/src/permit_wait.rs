//! What a permit waiter watches (see [`crate::permits`]): no herd, each
//! permit given back wakes one waiter.
//!
//! Holders give their permits back in any order, so the first waiter (the
//! node at position `limit`) watches every holder's node for its deletion,
//! with child watches (a permit node has no children), which the holders'
//! value changes do not fire. Any of them going lets it in, and wakes
//! nobody else.
//!
//! A waiter further back only needs to know when it becomes the first
//! waiter or when the node just ahead of it gives up: it watches that
//! node's data and deletion (`exists`). The node ahead, once it holds a
//! permit with someone behind it, writes its own node once; only holders
//! write their nodes, so a node whose data version is above 0 holds, and
//! the waiter behind it lists again at once instead of waiting for a
//! write that already happened.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use lock_core::LockError;
use zookeeper_client::{Error as ZkError, EventType, WatchedEvent};

use crate::error;
use crate::names::NodeName;
use crate::session::Session;
use crate::watch::NodeWatch;

/// The nodes a waiter watches in the permits directory.
pub(crate) enum Watched<'a> {
    /// Every holder's node: we are the first waiter.
    Holders(&'a [NodeName<'a>]),
    /// The node just ahead of us, a waiter in our latest listing.
    Predecessor(&'a str),
}

/// A watch's notification, polled in place: dropping the wait drops its
/// watchers at once, so their removal is sent while the session is open
/// (see [`crate::session`]).
type Event = Pin<Box<dyn Future<Output = WatchedEvent> + Send>>;

/// Watches what `watched` names in `dir` and returns once the queue may
/// have changed for us (the caller lists it again), or our own node
/// (`own`) is gone.
pub(crate) async fn wait(
    session: &Session,
    dir: &str,
    watched: Watched<'_>,
    own: &NodeWatch,
) -> Result<(), LockError> {
    let client = session.client();
    let mut events: Vec<Event> = Vec::new();
    match watched {
        Watched::Holders(holders) => {
            let paths: Vec<String> = holders
                .iter()
                .map(|node| format!("{dir}/{}", node.name))
                .collect();
            // Every request is sent before any reply is awaited.
            let requests: Vec<_> = paths
                .iter()
                .map(|path| session.request(client.list_and_watch_children(path)))
                .collect();
            for (path, request) in paths.iter().zip(requests) {
                match request.await {
                    Ok((_, watcher)) => events.push(Box::pin(watcher.changed())),
                    // A holder gone already: our turn may have come.
                    Err(ZkError::NoNode) => return Ok(()),
                    Err(e) => return Err(error::map(&format!("watch {path}"), e)),
                }
            }
        }
        Watched::Predecessor(name) => {
            let path = format!("{dir}/{name}");
            match session.request(client.check_and_watch_stat(&path)).await {
                // Gone, or holding (written since its creation): list again.
                Ok((None, _)) => return Ok(()),
                Ok((Some(stat), _)) if stat.version > 0 => return Ok(()),
                Ok((Some(_), watcher)) => events.push(Box::pin(watcher.changed())),
                Err(e) => return Err(error::map(&format!("watch {path}"), e)),
            }
        }
    }
    if events.is_empty() {
        return Ok(());
    }
    let first = std::future::poll_fn(|cx| {
        events
            .iter_mut()
            .find_map(|event| match event.as_mut().poll(cx) {
                Poll::Ready(event) => Some(event),
                Poll::Pending => None,
            })
            .map_or(Poll::Pending, Poll::Ready)
    });
    tokio::select! {
        event = first => check(&event),
        () = own.gone() => Ok(()),
    }
}

/// An error if `event` reports the end of the session.
fn check(event: &WatchedEvent) -> Result<(), LockError> {
    match event.event_type {
        EventType::Session if event.session_state.is_terminated() => {
            Err(error::map("wait for a permit", ZkError::SessionExpired))
        }
        _ => Ok(()),
    }
}
