//! Our node in a queue — a lock's contenders directory or a semaphore's
//! permits directory — and what every kind of acquire does with it: the
//! options it is created with, its parent directories, the listing of its
//! queue, finding it again after a create whose reply was lost, and
//! withdrawing it by its guid.

use std::sync::Arc;

use lock_core::LockError;
use zookeeper_client::{CreateMode, CreateOptions, Error as ZkError};

use crate::error;
use crate::layout::Layout;
use crate::session::Session;

/// How often a create is retried after its parent directory vanished.
pub(crate) const MAX_PARENT_RETRIES: usize = 5;

/// Our node in the queue.
#[derive(Debug)]
pub(crate) struct Contender {
    /// Its full path.
    pub(crate) path: String,
    /// The sequence number ZooKeeper appended to its name.
    pub(crate) sequence: i64,
    /// The zxid of its creation: the fencing token.
    pub(crate) czxid: i64,
}

/// How contender and permit nodes are created: ephemeral, sequential,
/// with the session's ACLs.
pub(crate) fn node_options(session: &Session) -> CreateOptions<'static> {
    CreateMode::EphemeralSequential.with_acls(session.acls())
}

/// Creates `dir` and its missing ancestors as container nodes, which the
/// server reclaims once they are empty.
pub(crate) async fn make_dirs(session: &Session, dir: &str) -> Result<(), LockError> {
    let options = CreateMode::Container.with_acls(session.acls());
    session
        .request(session.client().mkdir(dir, &options))
        .await
        .map_err(|e| error::map(&format!("create the lock directory {dir}"), e))
}

/// Lists `dir`; a missing directory has no contenders.
pub(crate) async fn list(session: &Session, dir: &str) -> Result<Vec<String>, LockError> {
    match session.request(session.client().list_children(dir)).await {
        Ok(children) => Ok(children),
        Err(ZkError::NoNode) => Ok(Vec::new()),
        Err(e) => Err(error::map(&format!("list {dir}"), e)),
    }
}

/// Our node after a create whose reply was lost: the lowest with our guid
/// (extra ones, from a create that was applied twice, are deleted).
pub(crate) async fn find_by_guid(
    session: &Session,
    dir: &str,
    guid: &str,
    layout: Layout,
) -> Result<Option<Contender>, LockError> {
    let children = list(session, dir).await?;
    let ours: Vec<_> = layout
        .queue(&children)
        .into_iter()
        .filter(|n| n.guid == guid)
        .collect();
    let Some(first) = ours.first() else {
        return Ok(None);
    };
    for extra in &ours[1..] {
        let _ = session
            .request(
                session
                    .client()
                    .delete(&format!("{dir}/{}", extra.name), None),
            )
            .await;
    }
    let path = format!("{dir}/{}", first.name);
    match session.request(session.client().check_stat(&path)).await {
        Ok(Some(stat)) => Ok(Some(Contender {
            sequence: first.sequence,
            czxid: stat.czxid,
            path,
        })),
        Ok(None) => Ok(None),
        Err(e) => Err(error::map(&format!("read {path}"), e)),
    }
}

/// Deletes every node of contender `guid` in `dir` (clean-up of a dropped
/// acquire whose create reply never came). Best effort.
pub(crate) async fn withdraw_by_guid(
    session: Arc<Session>,
    dir: String,
    guid: String,
    layout: Layout,
) {
    let client = session.client();
    // Sent after the create on the same session, so it sees the node.
    let Ok(children) = client.list_children(&dir).await else {
        return;
    };
    for node in layout
        .queue(&children)
        .into_iter()
        .filter(|n| n.guid == guid)
    {
        let _ = client.delete(&format!("{dir}/{}", node.name), None).await;
    }
}
