//! The lock queue: ephemeral sequential nodes, the lowest holds.
//!
//! An acquire creates `…/_locks/lock-<guid>-<sequence>` in one round trip
//! that also tells it whether it must look at the queue. Where the lock is
//! likely free, the create is a transaction with an empty write to the
//! directory, whose reply carries the directory's child count: a count of
//! one means our node is alone and the lock is ours, so a free lock costs
//! the server two requests (this and the release's delete), as a bare
//! create and delete do. Where the session last had to wait, the create
//! is sent with a listing of the directory pipelined behind it (ZooKeeper
//! answers a session's requests in order), so a waiter learns its place in
//! the same round trip (see [`crate::contended`]). A lock taken at once
//! watches its own node only once it has been held for
//! [`OWN_WATCH_DELAY`](crate::delayed::OWN_WATCH_DELAY)
//! (see [`NodeWatch`]). A waiter watches only the node just ahead of it
//! (no herd), so waiters are served in sequence order (FIFO). A holder's
//! release marks its node as it deletes it, so the waiter behind it holds
//! the lock without listing again; a node deleted unmarked (a waiter
//! giving up) makes it list the queue (see [`crate::ahead`]).
//!
//! Cancel-safety: until the acquire returns, a [`DeleteOnDrop`] deletes
//! the node — or, while the create's reply is outstanding, a
//! [`CleanupOnDrop`] finds it by its guid and deletes it.

use std::sync::Arc;
use std::time::Instant;

use lock_core::backend::{AcquireRequest, Acquired, CleanupOnDrop, HoldKind, Renewal, WaitMode};
use lock_core::{FencingToken, LockError};
use zookeeper_client::{
    CreateMode, CreateOptions, Error as ZkError, MultiWriteError, MultiWriteResult,
};

use crate::ahead::{self, Next};
use crate::cleanup::DeleteOnDrop;
use crate::delayed;
use crate::error::{self, outcome_unknown};
use crate::held::ZkHeld;
use crate::names::{kind_prefix, queue, NodeKind};
use crate::session::Session;
use crate::value::node_data;
use crate::watch::NodeWatch;

/// How often an acquire starts over when its node vanished while it
/// waited (taken away from the queue, or the container was reclaimed).
pub(crate) const MAX_RESTARTS: usize = 3;
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

/// How one pass through the queue ended.
pub(crate) enum Pass {
    /// The hold is ours.
    Acquired(Acquired),
    /// A [`WaitMode::Try`] that found the object busy.
    NotAcquired,
    /// Our node disappeared while we waited; enter the queue again.
    Removed,
}

/// Takes the lock `request` names in contenders directory `dir`: alone
/// (a `lock-` node) or, for [`HoldKind::Shared`], as a reader (a `read-`
/// node, in the same queue).
pub(crate) async fn acquire(
    session: &Arc<Session>,
    dir: &str,
    request: &AcquireRequest,
) -> Result<Option<Acquired>, LockError> {
    for _ in 0..MAX_RESTARTS {
        match pass(session, dir, request).await? {
            Pass::Acquired(acquired) => return Ok(Some(acquired)),
            Pass::NotAcquired => return Ok(None),
            Pass::Removed => {
                tracing::debug!(dir, "distlock: our queue entry vanished; queueing again");
            }
        }
    }
    Err(LockError::Backend {
        message: format!("our queue entry under {dir} kept being removed while waiting"),
        source: None,
    })
}

async fn pass(
    session: &Arc<Session>,
    dir: &str,
    request: &AcquireRequest,
) -> Result<Pass, LockError> {
    let client = session.client();
    let guid = uuid::Uuid::new_v4().simple().to_string();
    let requested_at = Instant::now();
    // Armed before the create is sent: if we are dropped before its reply,
    // the node is found by its guid and deleted.
    let by_guid = {
        let (session, dir, guid) = (Arc::clone(session), dir.to_owned(), guid.clone());
        CleanupOnDrop::new(move || withdraw_by_guid(session, dir, guid))
    };
    let data = node_data(request.owner.as_str(), &request.value);
    let shared = request.kind == HoldKind::Shared;
    let kind = if shared {
        NodeKind::Shared
    } else {
        NodeKind::Exclusive
    };
    let (me, mut listing) = enter(session, dir, kind, &guid, &data).await?;
    let cleanup = DeleteOnDrop::new(Arc::clone(session), me.path.clone());
    by_guid.disarm();
    // Started after the first look at the queue: at once for a waiter (it
    // must know if its node goes, or it could take the lock without one),
    // delayed for a lock taken at once.
    let mut own_watch: Option<NodeWatch> = None;
    let watch_own = |now: bool| {
        let (path, loss) = (me.path.clone(), request.loss.clone());
        if now {
            NodeWatch::start(session, path, loss)
        } else {
            delayed::watch_later(session, path, loss)
        }
    };
    let mut first_look = true;
    let mut waited = false;
    loop {
        let children = match listing.take() {
            Some(children) => children,
            None => list(session, dir).await?,
        };
        let nodes = queue(&children);
        if !nodes.iter().any(|n| n.sequence == me.sequence) {
            cleanup.disarm();
            return Ok(Pass::Removed);
        }
        if std::mem::take(&mut first_look) {
            let others_ahead = nodes.first().is_some_and(|n| n.sequence < me.sequence);
            session.contended().record(dir, others_ahead);
        }
        let Some(ahead) = ahead::blocking(&nodes, me.sequence, shared) else {
            let own = own_watch.unwrap_or_else(|| watch_own(false));
            return Ok(held(
                session,
                request,
                me,
                own,
                cleanup,
                requested_at,
                // Readers never mark their release (see `crate::ahead`).
                waited && !shared,
            ));
        };
        waited = true;
        if request.wait == WaitMode::Try {
            // Deleted before returning, so the next acquirer never queues
            // behind us; if this fails, the armed clean-up retries.
            if session.request(client.delete(&me.path, None)).await.is_ok() {
                cleanup.disarm();
            }
            return Ok(Pass::NotAcquired);
        }
        let own = own_watch.take().unwrap_or_else(|| watch_own(true));
        match ahead::wait(session, dir, ahead, &own).await? {
            Next::Hold => {
                let marked = !shared;
                return Ok(held(
                    session,
                    request,
                    me,
                    own,
                    cleanup,
                    requested_at,
                    marked,
                ));
            }
            Next::Relist => own_watch = Some(own),
        }
    }
}

/// The hold is ours: hand the node to a [`ZkHeld`] (whose release marks
/// the node if `marked`) — unless the node is already known to have
/// vanished, then queue again.
pub(crate) fn held(
    session: &Arc<Session>,
    request: &AcquireRequest,
    me: Contender,
    own: NodeWatch,
    cleanup: DeleteOnDrop,
    requested_at: Instant,
    marked: bool,
) -> Pass {
    cleanup.disarm();
    if !own.hold() {
        return Pass::Removed;
    }
    Pass::Acquired(Acquired {
        // czxid: the zxid of the node's creation, ensemble-wide increasing
        // and persisted, unlike sequence numbers, which restart when a
        // reclaimed container directory is created again.
        token: FencingToken::new(me.czxid.unsigned_abs()),
        requested_at,
        renewal: Renewal::Managed,
        held: Box::new(ZkHeld::new(
            Arc::clone(session),
            request.owner.clone(),
            me.path,
            own,
            marked,
            requested_at,
        )),
    })
}

/// Creates our node (and its parent directories, as containers, when
/// missing). Returns the directory's listing when it came with the create:
/// pipelined behind it where the session last had to wait, or, elsewhere,
/// known without one because the create's transaction found our node alone.
/// After a lost reply, finds the node by its guid instead of creating a
/// second one (and returns no listing).
async fn enter(
    session: &Session,
    dir: &str,
    kind: NodeKind,
    guid: &str,
    data: &[u8],
) -> Result<Entered, LockError> {
    let prefix = kind_prefix(dir, kind, guid);
    let mut busy = session.contended().was_contended(dir);
    let mut parent_retries = 0;
    let node = NewNode {
        dir,
        prefix: &prefix,
        data,
    };
    loop {
        let entered = if busy {
            create_and_list(session, &node).await
        } else {
            create_and_count(session, &node).await
        };
        match entered {
            Ok(entered) => return Ok(entered),
            Err(Entry::Refused) => busy = true,
            Err(Entry::Failed(ZkError::NoNode)) if parent_retries < MAX_PARENT_RETRIES => {
                parent_retries += 1;
                make_dirs(session, dir).await?;
            }
            Err(Entry::Failed(e)) if outcome_unknown(&e) => {
                session.ready().await?;
                if let Some(me) = find_by_guid(session, dir, guid).await? {
                    return Ok((me, None));
                }
            }
            Err(Entry::Failed(e)) => {
                return Err(error::map(&format!("create a lock node in {dir}"), e))
            }
        }
    }
}

/// Our node in the queue, with the directory's listing if the create
/// brought it.
type Entered = (Contender, Option<Vec<String>>);

/// The node an acquire creates.
#[derive(Clone, Copy)]
struct NewNode<'a> {
    /// The contenders directory.
    dir: &'a str,
    /// The node's path up to the sequence number ZooKeeper appends.
    prefix: &'a str,
    /// The node's data: the lock's owner and value (see [`node_data`]).
    data: &'a [u8],
}

/// How lock nodes are created: ephemeral, sequential, with the session's
/// ACLs.
pub(crate) fn node_options(session: &Session) -> CreateOptions<'static> {
    CreateMode::EphemeralSequential.with_acls(session.acls())
}

/// Why a create did not enter the queue.
enum Entry {
    /// The directory refused the transaction's write to it (an ACL without
    /// WRITE): enter with a plain create instead.
    Refused,
    /// The create failed.
    Failed(ZkError),
}

/// Creates our node with the listing pipelined behind it (ZooKeeper
/// answers a session's requests in order, so the listing includes it).
async fn create_and_list(session: &Session, node: &NewNode<'_>) -> Result<Entered, Entry> {
    let (client, options) = (session.client(), node_options(session));
    let NewNode { dir, prefix, data } = *node;
    // Both requests are sent here, in this order, before either is awaited.
    let create = client.create(prefix, data, &options);
    let listing = client.list_children(dir);
    let (created, listed) = tokio::join!(session.request(create), session.request(listing));
    let (stat, sequence) = created.map_err(Entry::Failed)?;
    let me = Contender {
        path: format!("{prefix}{sequence}"),
        sequence: sequence.into_i64(),
        czxid: stat.czxid,
    };
    Ok((me, listed.ok()))
}

/// Creates our node in one transaction with an empty write to its
/// directory, whose reply is the directory's stat after the create: if
/// the directory holds one child, that is our node and the lock is ours,
/// with no listing. (All of a transaction's changes carry its zxid, so the
/// directory's new mzxid is our node's czxid.)
async fn create_and_count(session: &Session, node: &NewNode<'_>) -> Result<Entered, Entry> {
    let (client, options) = (session.client(), node_options(session));
    let NewNode { dir, prefix, data } = *node;
    let mut transaction = client.new_multi_writer();
    transaction
        .add_create(prefix, data, &options)
        .and_then(|()| transaction.add_set_data(dir, &[], None))
        .map_err(Entry::Failed)?;
    let results = match session.request(transaction.commit()).await {
        Ok(results) => results,
        Err(MultiWriteError::OperationFailed {
            index: 1,
            source: ZkError::NoAuth,
        }) => return Err(Entry::Refused),
        Err(e) => return Err(Entry::Failed(e.into())),
    };
    let (path, dir_stat) = match <[MultiWriteResult; 2]>::try_from(results) {
        Ok([MultiWriteResult::Create { path, .. }, MultiWriteResult::SetData { stat }]) => {
            (path, stat)
        }
        other => return Err(unexpected(&format!("{other:?}"))),
    };
    let sequence = path
        .strip_prefix(prefix)
        .and_then(|sequence| sequence.parse().ok())
        .ok_or_else(|| unexpected(&path))?;
    let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
    let me = Contender {
        sequence,
        czxid: dir_stat.mzxid,
        path,
    };
    let alone = dir_stat.num_children == 1;
    Ok((me, alone.then(|| vec![name])))
}

/// A reply to our create transaction that is not what ZooKeeper sends.
fn unexpected(what: &str) -> Entry {
    Entry::Failed(ZkError::UnexpectedError(format!(
        "unexpected reply to a lock node's create: {what}"
    )))
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
) -> Result<Option<Contender>, LockError> {
    let children = list(session, dir).await?;
    let ours: Vec<_> = queue(&children)
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
pub(crate) async fn withdraw_by_guid(session: Arc<Session>, dir: String, guid: String) {
    let client = session.client();
    // Sent after the create on the same session, so it sees the node.
    let Ok(children) = client.list_children(&dir).await else {
        return;
    };
    for node in queue(&children).into_iter().filter(|n| n.guid == guid) {
        let _ = client.delete(&format!("{dir}/{}", node.name), None).await;
    }
}
