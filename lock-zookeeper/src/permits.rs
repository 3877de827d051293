//! Semaphores: ephemeral sequential `permit-<guid>-<sequence>` nodes in
//! the name's permits directory (`…/<key>/_permits`), whose data is the
//! semaphore's limit. The first `limit` nodes in sequence order hold a
//! permit; the others wait in that order (FIFO).
//!
//! **The stored limit.** The directory is a container node (the server
//! reclaims it once empty) and its data is set only when it is created:
//! it never changes while it exists. An acquire creates its node and, in
//! the same round trip (ZooKeeper answers a session's requests in order),
//! reads the directory's data and lists it. The directory cannot be
//! deleted while our node is in it, so that read is the limit our node
//! was created under. If it is our limit, we queue. If not, and other
//! permit nodes are there, the request fails with
//! [`LockError::LimitMismatch`] (our node deleted first). If ours is the
//! only node, the semaphore is taken over under our limit by one
//! transaction that deletes our node and the directory, creates the
//! directory with our limit and our node again; the directory's delete
//! fails if anyone else entered meanwhile, and we look again.
//!
//! **Waiting** (no herd; see [`crate::permit_wait`]): the first waiter
//! (position `limit`) watches every holder's node for its deletion, so a
//! permit given back wakes it alone. Waiters further back watch the node
//! just ahead of them, for its deletion (a waiter giving up) or its data
//! change: a waiter that gets in while others wait behind it writes its
//! own node once, which tells the waiter behind it that it is now the
//! first waiter.
//!
//! **Tokens** are the permit nodes' czxids: increasing per semaphore (and
//! across the ensemble), through restarts and leader changes.

use lock_core::{LockError, LockName};
use zookeeper_client::{CreateMode, Error as ZkError, MultiWriteError, MultiWriteResult};

use crate::acquire::{Entered, Look, NewNode, Next, Queue};
use crate::contender::{find_by_guid, make_dirs, node_options, Contender, MAX_PARENT_RETRIES};
use crate::error::{self, outcome_unknown};
use crate::layout::Layout;
use crate::names::{kind_prefix, parse_limit, queue, NodeKind};
use crate::permit_wait::{self, Watched};
use crate::session::Session;
use crate::watch::NodeWatch;

/// How often an acquire looks again at a semaphore whose limit others
/// keep changing under it.
const MAX_LIMIT_RETRIES: usize = 10;

/// A semaphore's queue: the permits directory `dir`, where an acquire
/// enters a `permit-` node under `limit`.
pub(crate) struct PermitQueue<'d> {
    dir: &'d str,
    limit: u32,
    /// The semaphore's name, for errors.
    name: &'d LockName,
}

impl<'d> PermitQueue<'d> {
    /// The queue of semaphore `name`, in its permits directory `dir`,
    /// entered under `limit`.
    pub(crate) fn new(dir: &'d str, limit: u32, name: &'d LockName) -> Self {
        Self { dir, limit, name }
    }
}

impl Queue for PermitQueue<'_> {
    type Ahead<'a> = Watched<'a>;

    const NODE: &'static str = "permit node";

    fn dir(&self) -> &str {
        self.dir
    }

    /// Creates our node under a directory holding our limit (see the
    /// module docs); the directory's listing always comes with it.
    async fn enter(&self, session: &Session, node: NewNode<'_>) -> Result<Entered, LockError> {
        let entry = Entry {
            dir: node.dir,
            guid: node.guid,
            data: node.data,
            limit: self.limit,
            name: self.name,
        };
        // On an error, the clean-up finds whatever node of ours is left.
        enter(session, &entry).await
    }

    /// The first `limit` nodes hold. One that holds with others behind it
    /// writes its node, which tells the waiter behind it that it is now
    /// the first waiter (see the module docs).
    fn look<'a>(&self, session: &Session, look: &Look<'_, 'a>) -> Option<Watched<'a>> {
        let (nodes, position, limit) = (look.nodes, look.position, self.limit as usize);
        if position < limit {
            if position + 1 < nodes.len() {
                // Sent now, ahead of any later write of ours; its reply is
                // not waited for.
                let mark = session.client().set_data(&look.me.path, look.data, None);
                tokio::spawn(async move { drop(mark.await) });
            }
            return None;
        }
        Some(if position == limit {
            Watched::Holders(&nodes[..limit])
        } else {
            Watched::Predecessor(nodes[position - 1].name)
        })
    }

    /// Permits never mark their release: a waiter lists again.
    fn marks_release(&self) -> bool {
        false
    }

    async fn wait<'w>(
        &'w self,
        session: &'w Session,
        watched: Self::Ahead<'w>,
        own: &'w NodeWatch,
    ) -> Result<Next, LockError> {
        permit_wait::wait(session, self.dir, watched, own).await?;
        Ok(Next::Relist)
    }
}

/// What an acquire enters a semaphore with.
struct Entry<'a> {
    dir: &'a str,
    guid: &'a str,
    /// Our node's data (owner and value).
    data: &'a [u8],
    limit: u32,
    /// The semaphore's name, for errors.
    name: &'a LockName,
}

/// Creates our permit node under a directory holding our limit; returns
/// it with the directory's listing after its creation. See the module
/// docs for the limit.
async fn enter(session: &Session, entry: &Entry<'_>) -> Result<Entered, LockError> {
    let Entry {
        dir, guid, limit, ..
    } = *entry;
    let client = session.client();
    let prefix = kind_prefix(dir, NodeKind::Permit, guid);
    let mut me: Option<Contender> = None;
    let mut parent_retries = 0;
    for _ in 0..MAX_LIMIT_RETRIES {
        // All requests are sent here, in this order, before any is awaited.
        let create = me
            .is_none()
            .then(|| client.create(&prefix, entry.data, &node_options(session)));
        let read = client.get_data(dir);
        let listing = client.list_children(dir);
        if let Some(create) = create {
            match session.request(create).await {
                Ok((stat, sequence)) => {
                    me = Some(Contender {
                        path: format!("{prefix}{sequence}"),
                        sequence: sequence.into_i64(),
                        czxid: stat.czxid,
                    });
                }
                Err(ZkError::NoNode) if parent_retries < MAX_PARENT_RETRIES => {
                    parent_retries += 1;
                    make_permits_dir(session, dir, limit).await?;
                    continue;
                }
                Err(e) if outcome_unknown(&e) => {
                    session.ready().await?;
                    me = find_by_guid(session, dir, guid, Layout::Distlock).await?;
                    continue;
                }
                Err(e) => return Err(error::map(&format!("create a permit node in {dir}"), e)),
            }
        }
        let Some(ours) = me.take() else { continue };
        let (read, children) = match (session.request(read).await, session.request(listing).await) {
            (Ok((data, _)), Ok(children)) => (data, children),
            // Our node is gone with its directory: enter again.
            (Err(ZkError::NoNode), _) | (_, Err(ZkError::NoNode)) => continue,
            (Err(e), _) | (_, Err(e)) => return Err(error::map(&format!("read {dir}"), e)),
        };
        let stored = parse_limit(&read);
        match settle(session, entry, ours, stored, children, &prefix).await? {
            Settled::Entered(entered) => return Ok(entered),
            Settled::Again(node) => me = node,
        }
    }
    Err(LockError::Unavailable {
        message: format!("the limit of semaphore {dir} kept changing while entering it"),
        source: None,
    })
}

/// What [`settle`] made of our node.
enum Settled {
    /// In the queue, under our limit.
    Entered(Entered),
    /// Look again, with our node if it is known to be there.
    Again(Option<Contender>),
}

/// Settles our node `ours` in a directory whose data holds limit `stored`
/// and whose listing is `children`: under our limit it is entered; with
/// another limit it fails with [`LockError::LimitMismatch`] while others
/// are queued, and takes the semaphore over while none are.
async fn settle(
    session: &Session,
    entry: &Entry<'_>,
    ours: Contender,
    stored: Option<u32>,
    children: Vec<String>,
    prefix: &str,
) -> Result<Settled, LockError> {
    let Entry {
        dir, guid, limit, ..
    } = *entry;
    if stored == Some(limit) {
        return Ok(Settled::Entered((ours, Some(children))));
    }
    let others = queue(&children).iter().any(|n| n.guid != guid);
    if others {
        withdraw(session, &ours.path).await;
        return Err(LockError::LimitMismatch {
            key: entry.name.key().to_string(),
            stored: stored.unwrap_or(0),
            asked: limit,
        });
    }
    match take_over(session, entry, &ours, prefix).await {
        Ok(taken) => {
            let name = taken.path.rsplit('/').next().unwrap_or_default().to_owned();
            Ok(Settled::Entered((taken, Some(vec![name]))))
        }
        // Someone entered (or replaced the directory) meanwhile; our
        // node is still there: look again.
        Err(TakeOver::Raced) => Ok(Settled::Again(Some(ours))),
        Err(TakeOver::Unknown) => {
            session.ready().await?;
            Ok(Settled::Again(
                find_by_guid(session, dir, guid, Layout::Distlock).await?,
            ))
        }
        Err(TakeOver::Failed(e)) => {
            withdraw(session, &ours.path).await;
            Err(error::map(&format!("set the limit of {dir}"), e))
        }
    }
}

/// Why a [`take_over`] did not happen.
enum TakeOver {
    /// The directory was not empty but for our node any more, or was
    /// replaced: our node is unchanged.
    Raced,
    /// The reply was lost: the transaction may or may not have been
    /// applied.
    Unknown,
    /// The server refused it.
    Failed(ZkError),
}

/// Replaces the permits directory, which holds only our node `ours`, with
/// one holding our limit and a new node of ours, in one transaction.
async fn take_over(
    session: &Session,
    entry: &Entry<'_>,
    ours: &Contender,
    prefix: &str,
) -> Result<Contender, TakeOver> {
    let dir = entry.dir;
    let limit = entry.limit.to_string();
    let client = session.client();
    let dir_options = CreateMode::Container.with_acls(session.acls());
    let mut transaction = client.new_multi_writer();
    transaction
        .add_delete(&ours.path, None)
        .and_then(|()| transaction.add_delete(dir, None))
        .and_then(|()| transaction.add_create(dir, limit.as_bytes(), &dir_options))
        .and_then(|()| transaction.add_create(prefix, entry.data, &node_options(session)))
        // Our new node's czxid: the transaction's zxid, this write's mzxid.
        .and_then(|()| transaction.add_set_data(dir, limit.as_bytes(), None))
        .map_err(TakeOver::Failed)?;
    let results = match session.request(transaction.commit()).await {
        Ok(results) => results,
        Err(MultiWriteError::OperationFailed {
            source: ZkError::NotEmpty | ZkError::NoNode | ZkError::NodeExists,
            ..
        }) => return Err(TakeOver::Raced),
        Err(e) => {
            let e = ZkError::from(e);
            return Err(if outcome_unknown(&e) {
                TakeOver::Unknown
            } else {
                TakeOver::Failed(e)
            });
        }
    };
    let created = results.iter().find_map(|result| match result {
        MultiWriteResult::Create { path, .. } if path.starts_with(prefix) => Some(path.clone()),
        _ => None,
    });
    let mzxid = results.iter().find_map(|result| match result {
        MultiWriteResult::SetData { stat } => Some(stat.mzxid),
        _ => None,
    });
    let (Some(path), Some(czxid)) = (created, mzxid) else {
        return Err(TakeOver::Failed(ZkError::UnexpectedError(format!(
            "unexpected reply to taking over {dir}: {results:?}"
        ))));
    };
    let sequence = path[prefix.len()..]
        .parse()
        .map_err(|_| TakeOver::Failed(ZkError::UnexpectedError(path.clone())))?;
    Ok(Contender {
        path,
        sequence,
        czxid,
    })
}

/// Creates the permits directory `dir` (and its missing ancestors) with
/// `limit` as its data; one that exists already is left as it is.
async fn make_permits_dir(session: &Session, dir: &str, limit: u32) -> Result<(), LockError> {
    let options = CreateMode::Container.with_acls(session.acls());
    let data = limit.to_string();
    let client = session.client();
    let mut created = session
        .request(client.create(dir, data.as_bytes(), &options))
        .await
        .map(drop);
    if created == Err(ZkError::NoNode) {
        let parent = &dir[..dir.rfind('/').unwrap_or(0)];
        make_dirs(session, parent).await?;
        created = session
            .request(client.create(dir, data.as_bytes(), &options))
            .await
            .map(drop);
    }
    match created {
        Ok(()) | Err(ZkError::NodeExists) => Ok(()),
        Err(e) => Err(error::map(
            &format!("create the semaphore directory {dir}"),
            e,
        )),
    }
}

/// Deletes our node before failing; best effort (the session's end or
/// the clean-up by guid deletes it otherwise).
async fn withdraw(session: &Session, path: &str) {
    let _ = session.request(session.client().delete(path, None)).await;
}
