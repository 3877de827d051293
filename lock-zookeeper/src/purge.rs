//! Removing a whole namespace: its subtree, deepest nodes first.
//!
//! The subtree is read level by level, then deleted from the deepest
//! level up; the requests of a level are sent [`BATCH`] at a time before
//! their replies are awaited (ZooKeeper answers a session's requests in
//! order), so a namespace of thousands of locks costs a few round trips
//! per level, not one per node. Nodes that vanish meanwhile (a holder releasing, a
//! container the server reclaims) are fine; a node that gains a child
//! meanwhile (someone queueing) refuses its delete, and the subtree is
//! read and deleted again, at most [`ROUNDS`] times.

use std::future::Future;

use lock_core::LockError;
use zookeeper_client::Error as ZkError;

use crate::error;
use crate::session::Session;

/// How many times the subtree is read and deleted before giving up on a
/// namespace that keeps gaining nodes.
const ROUNDS: usize = 5;

/// How many requests travel together: each has its own reply deadline,
/// counted from when it is sent.
const BATCH: usize = 500;

/// Deletes `root` and every node under it.
///
/// # Errors
///
/// What the server says about a read or delete other than "no node"
/// (mapped by [`error::map`]), or [`LockError::Backend`] when new nodes
/// kept appearing for [`ROUNDS`] rounds.
pub(crate) async fn delete_tree(session: &Session, root: &str) -> Result<(), LockError> {
    for _ in 0..ROUNDS {
        let levels = read_levels(session, root).await?;
        if delete_levels(session, &levels).await? {
            return Ok(());
        }
    }
    Err(LockError::backend(
        format!("ZooKeeper kept creating nodes under {root} while it was being removed"),
        ZkError::NotEmpty,
    ))
}

/// The subtree of `root` by depth: `root` alone, then its children, then
/// theirs. Empty if `root` does not exist.
async fn read_levels(session: &Session, root: &str) -> Result<Vec<Vec<String>>, LockError> {
    let mut levels = Vec::new();
    let mut level = vec![root.to_owned()];
    while !level.is_empty() {
        let listings = batched(&level, |path| {
            session.request(session.client().list_children(path))
        })
        .await;
        let mut next = Vec::new();
        let mut present = Vec::with_capacity(level.len());
        for (path, listing) in level.into_iter().zip(listings) {
            match listing {
                Ok(children) => {
                    next.extend(children.iter().map(|child| format!("{path}/{child}")));
                    present.push(path);
                }
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(error::map(&format!("list {path}"), e)),
            }
        }
        if !present.is_empty() {
            levels.push(present);
        }
        level = next;
    }
    Ok(levels)
}

/// Deletes `levels`, the deepest first. False if some node had gained a
/// child and was left in place.
async fn delete_levels(session: &Session, levels: &[Vec<String>]) -> Result<bool, LockError> {
    let mut complete = true;
    for level in levels.iter().rev() {
        let deletes = batched(level, |path| {
            session.request(session.client().delete(path, None))
        })
        .await;
        for (path, deleted) in level.iter().zip(deletes) {
            match deleted {
                Ok(()) | Err(ZkError::NoNode) => {}
                Err(ZkError::NotEmpty) => complete = false,
                Err(e) => return Err(error::map(&format!("delete {path}"), e)),
            }
        }
    }
    Ok(complete)
}

/// Makes `request` for every path, [`BATCH`] at a time, and returns the
/// replies in order: zookeeper-client sends a request when it is made, so
/// the requests of a batch travel together and their replies come back
/// in the same order.
async fn batched<'a, T, F, Fut>(paths: &'a [String], request: F) -> Vec<T>
where
    F: Fn(&'a str) -> Fut,
    Fut: Future<Output = T>,
{
    let mut replies = Vec::with_capacity(paths.len());
    for batch in paths.chunks(BATCH) {
        let sent: Vec<Fut> = batch.iter().map(|path| request(path)).collect();
        for reply in sent {
            replies.push(reply.await);
        }
    }
    replies
}
