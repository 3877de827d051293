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
//! [`OWN_WATCH_DELAY`](crate::watch::OWN_WATCH_DELAY) (see [`NodeWatch`]).
//! A waiter watches only the node just ahead of it (no herd), so waiters
//! are served in sequence order (FIFO). A holder's release marks its node
//! as it deletes it, so the waiter behind it holds the lock without
//! listing again; a node deleted unmarked (a waiter giving up) makes it
//! list the queue (see [`crate::ahead`]).
//!
//! The acquire itself (the restarts, the clean-ups, the own-node watch) is
//! [`crate::acquire`]'s; this is the lock's [`Queue`].

use lock_core::backend::HoldKind;
use lock_core::LockError;
use zookeeper_client::{Error as ZkError, MultiWriteError, MultiWriteResult};

use crate::acquire::{Entered, Look, NewNode, Next, Queue};
use crate::ahead::{self, Ahead};
use crate::contender::{find_by_guid, make_dirs, node_options, Contender, MAX_PARENT_RETRIES};
use crate::error::{self, outcome_unknown};
use crate::layout::Layout;
use crate::names::{kind_prefix, NodeKind};
use crate::session::Session;
use crate::watch::NodeWatch;

/// A lock's queue: the contenders directory `dir`, where an acquire
/// enters an exclusive (`lock-`) node, or a reader's (`read-`).
pub(crate) struct LockQueue<'d> {
    dir: &'d str,
    /// Whether we enter as a reader.
    shared: bool,
}

impl<'d> LockQueue<'d> {
    /// The queue in contenders directory `dir`, entered for a hold of
    /// `kind`: [`HoldKind::Shared`] as a reader, any other alone.
    pub(crate) fn new(dir: &'d str, kind: HoldKind) -> Self {
        Self {
            dir,
            shared: kind == HoldKind::Shared,
        }
    }
}

impl Queue for LockQueue<'_> {
    type Ahead<'a> = Ahead<'a>;

    const NODE: &'static str = "queue entry";

    fn dir(&self) -> &str {
        self.dir
    }

    /// Creates our node (see [`create_node`]). The directory's listing
    /// comes with the create where the session last had to wait
    /// (pipelined behind it), and elsewhere where the create's transaction
    /// found our node alone (no listing needed); not after a lost reply.
    async fn enter(&self, session: &Session, node: NewNode<'_>) -> Result<Entered, LockError> {
        let NewNode { dir, guid, data } = node;
        let kind = if self.shared {
            NodeKind::Shared
        } else {
            NodeKind::Exclusive
        };
        let prefix = kind_prefix(dir, kind, guid);
        let creation = Creation {
            dir,
            prefix: &prefix,
            data,
        };
        let busy = session.contended().was_contended(dir);
        create_node(session, &creation, guid, Layout::Distlock, busy).await
    }

    /// On the first look, records whether others were ahead (see
    /// [`crate::contended`]); waits for what [`ahead::blocking`] names.
    fn look<'a>(&self, session: &Session, look: &Look<'_, 'a>) -> Option<Ahead<'a>> {
        if look.first {
            let others_ahead = look
                .nodes
                .first()
                .is_some_and(|n| n.sequence < look.me.sequence);
            session.contended().record(self.dir, others_ahead);
        }
        ahead::blocking(look.nodes, look.me.sequence, self.shared)
    }

    /// Readers never mark their release (see [`crate::ahead`]).
    fn marks_release(&self) -> bool {
        !self.shared
    }

    async fn wait<'w>(
        &'w self,
        session: &'w Session,
        ahead: Self::Ahead<'w>,
        own: &'w NodeWatch,
    ) -> Result<Next, LockError> {
        ahead::wait(session, self.dir, ahead, own).await
    }
}

/// The create of our node.
#[derive(Clone, Copy)]
pub(crate) struct Creation<'a> {
    /// The contenders directory.
    pub(crate) dir: &'a str,
    /// The node's path up to the sequence number ZooKeeper appends.
    pub(crate) prefix: &'a str,
    /// The node's data (see [`Layout::node_data`]).
    pub(crate) data: &'a [u8],
}

/// Creates our node (and its parent directories, as containers, when
/// missing), named by `creation` with id `guid` in `layout`. With `busy`
/// (or once the directory refused the count's write), the listing is
/// pipelined behind the create; otherwise the create counts the
/// directory's children (see the module docs). After a lost reply, finds
/// the node by its guid instead of creating a second one.
pub(crate) async fn create_node(
    session: &Session,
    creation: &Creation<'_>,
    guid: &str,
    layout: Layout,
    mut busy: bool,
) -> Result<Entered, LockError> {
    let dir = creation.dir;
    let mut parent_retries = 0;
    loop {
        let entered = if busy {
            create_and_list(session, creation).await
        } else {
            create_and_count(session, creation).await
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
                if let Some(me) = find_by_guid(session, dir, guid, layout).await? {
                    return Ok((me, None));
                }
            }
            Err(Entry::Failed(e)) => {
                return Err(error::map(&format!("create a lock node in {dir}"), e))
            }
        }
    }
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
async fn create_and_list(session: &Session, creation: &Creation<'_>) -> Result<Entered, Entry> {
    let (client, options) = (session.client(), node_options(session));
    let Creation { dir, prefix, data } = *creation;
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
async fn create_and_count(session: &Session, creation: &Creation<'_>) -> Result<Entered, Entry> {
    let (client, options) = (session.client(), node_options(session));
    let Creation { dir, prefix, data } = *creation;
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
