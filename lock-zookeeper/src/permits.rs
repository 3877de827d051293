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

use std::sync::Arc;
use std::time::Instant;

use lock_core::backend::{AcquireRequest, Acquired, CleanupOnDrop, WaitMode};
use lock_core::{LockError, LockName};
use zookeeper_client::{CreateMode, Error as ZkError, MultiWriteError, MultiWriteResult};

use crate::cleanup::DeleteOnDrop;
use crate::delayed;
use crate::error::{self, outcome_unknown};
use crate::names::{kind_prefix, queue, NodeKind};
use crate::permit_wait::{self, Watched};
use crate::queue::{
    find_by_guid, held, list, make_dirs, node_options, withdraw_by_guid, Contender, Pass,
    MAX_PARENT_RETRIES, MAX_RESTARTS,
};
use crate::session::Session;
use crate::value::node_data;
use crate::watch::NodeWatch;

/// How often an acquire looks again at a semaphore whose limit others
/// keep changing under it.
const MAX_LIMIT_RETRIES: usize = 10;

/// Takes one permit of the semaphore whose permits directory is `dir`,
/// under `limit`.
pub(crate) async fn acquire(
    session: &Arc<Session>,
    dir: &str,
    request: &AcquireRequest,
    limit: u32,
) -> Result<Option<Acquired>, LockError> {
    for _ in 0..MAX_RESTARTS {
        match pass(session, dir, request, limit).await? {
            Pass::Acquired(acquired) => return Ok(Some(acquired)),
            Pass::NotAcquired => return Ok(None),
            Pass::Removed => {
                tracing::debug!(dir, "distlock: our permit node vanished; queueing again");
            }
        }
    }
    Err(LockError::Backend {
        message: format!("our permit node under {dir} kept being removed while waiting"),
        source: None,
    })
}

async fn pass(
    session: &Arc<Session>,
    dir: &str,
    request: &AcquireRequest,
    limit: u32,
) -> Result<Pass, LockError> {
    let client = session.client();
    let guid = uuid::Uuid::new_v4().simple().to_string();
    let requested_at = Instant::now();
    // Armed before the create is sent (see `crate::queue`).
    let by_guid = {
        let (session, dir, guid) = (Arc::clone(session), dir.to_owned(), guid.clone());
        CleanupOnDrop::new(move || withdraw_by_guid(session, dir, guid))
    };
    let data = node_data(request.owner.as_str(), &request.value);
    let entry = Entry {
        dir,
        guid: &guid,
        data: &data,
        limit,
        name: &request.name,
    };
    // On an error, the clean-up finds whatever node of ours is left.
    let (me, first_listing) = enter(session, &entry).await?;
    let cleanup = DeleteOnDrop::new(Arc::clone(session), me.path.clone());
    by_guid.disarm();
    let mut listing = Some(first_listing);
    let mut own_watch: Option<NodeWatch> = None;
    let limit = limit as usize;
    loop {
        let children = match listing.take() {
            Some(children) => children,
            None => list(session, dir).await?,
        };
        let nodes = queue(&children);
        let Some(position) = nodes.iter().position(|n| n.sequence == me.sequence) else {
            cleanup.disarm();
            return Ok(Pass::Removed);
        };
        if position < limit {
            if position + 1 < nodes.len() {
                // Someone behind us may have seen us waiting: tell it we
                // are in (see the module docs). Sent now, ahead of any
                // later write of ours; its reply is not waited for.
                let mark = session.client().set_data(&me.path, &data, None);
                tokio::spawn(async move { drop(mark.await) });
            }
            let own = own_watch.unwrap_or_else(|| {
                delayed::watch_later(session, me.path.clone(), request.loss.clone())
            });
            return Ok(held(
                session,
                request,
                me,
                own,
                cleanup,
                requested_at,
                false,
            ));
        }
        if request.wait == WaitMode::Try {
            if session.request(client.delete(&me.path, None)).await.is_ok() {
                cleanup.disarm();
            }
            return Ok(Pass::NotAcquired);
        }
        let own = own_watch
            .take()
            .unwrap_or_else(|| NodeWatch::start(session, me.path.clone(), request.loss.clone()));
        let watched = if position == limit {
            Watched::Holders(nodes[..limit].iter().map(|n| n.name).collect())
        } else {
            Watched::Predecessor(nodes[position - 1].name)
        };
        permit_wait::wait(session, dir, watched, &own).await?;
        own_watch = Some(own);
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
async fn enter(
    session: &Session,
    entry: &Entry<'_>,
) -> Result<(Contender, Vec<String>), LockError> {
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
                    me = find_by_guid(session, dir, guid).await?;
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
        if stored == Some(limit) {
            return Ok((ours, children));
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
        match take_over(session, entry, &ours, &prefix).await {
            Ok(taken) => {
                let name = taken.path.rsplit('/').next().unwrap_or_default().to_owned();
                return Ok((taken, vec![name]));
            }
            // Someone entered (or replaced the directory) meanwhile; our
            // node is still there: look again.
            Err(TakeOver::Raced) => me = Some(ours),
            Err(TakeOver::Unknown) => {
                session.ready().await?;
                me = find_by_guid(session, dir, guid).await?;
            }
            Err(TakeOver::Failed(e)) => {
                withdraw(session, &ours.path).await;
                return Err(error::map(&format!("set the limit of {dir}"), e));
            }
        }
    }
    Err(LockError::Unavailable {
        message: format!("the limit of semaphore {dir} kept changing while entering it"),
        source: None,
    })
}

/// The limit a permits directory's data holds, if any.
pub(crate) fn parse_limit(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data).ok()?.parse().ok()
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
