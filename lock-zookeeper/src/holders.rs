//! Who holds a name's lock (its exclusive holder, or its readers) or its
//! semaphore's permits, as of the call.

use lock_core::backend::HoldKind;
use lock_core::{LockError, LockInfo};
use zookeeper_client::Error as ZkError;

use crate::error;
use crate::layout::Layout;
use crate::names::{parse_limit, NodeKind, NodeName};
use crate::session::Session;

/// How often a read of who holds (`inspect`, `holders`, `force_release`,
/// a watch) looks again when the node it picked vanished under it.
pub(crate) const RACE_RETRIES: usize = 5;

/// One holder's node.
#[derive(Debug)]
pub(crate) struct HolderNode {
    /// Its full path.
    pub(crate) path: String,
    /// What it holds and how, with its value and token.
    pub(crate) info: LockInfo,
}

/// Which object [`holders`] reads.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Object {
    /// A lock's contenders directory, its nodes named as the layout names
    /// them: the first node if it is exclusive, else every reader before
    /// the first exclusive node.
    Lock(Layout),
    /// A semaphore's permits directory: the first `limit` nodes, with the
    /// limit the directory stores.
    Semaphore,
    /// A Curator InterProcessSemaphoreV2's `leases` directory: every lease,
    /// but the newest while someone holds the semaphore's `locks` mutex
    /// beside it (that lease may be waiting for room; see
    /// [`crate::curator::semaphore`]).
    Leases,
}

impl Object {
    fn layout(self) -> Layout {
        match self {
            Self::Lock(layout) => layout,
            Self::Semaphore => Layout::Distlock,
            Self::Leases => Layout::Curator,
        }
    }
}

/// The holders in directory `dir` (oldest first), as of this call: every
/// hold taken before it (by any session) is seen.
pub(crate) async fn holders(
    session: &Session,
    dir: &str,
    object: Object,
) -> Result<Vec<HolderNode>, LockError> {
    let client = session.client();
    // Reads are served by the server this session is connected to, which
    // may lag behind the leader: `sync` makes it catch up first.
    session
        .request(client.sync("/"))
        .await
        .map_err(|e| error::map("sync with the leader", e))?;
    let locks = matches!(object, Object::Leases).then(|| locks_beside(dir));
    for _ in 0..RACE_RETRIES {
        // Every request is sent before any is awaited.
        let limit = matches!(object, Object::Semaphore).then(|| client.get_data(dir));
        let entering = locks.as_deref().map(|locks| client.list_children(locks));
        let listing = client.list_children(dir);
        let limit = match limit {
            None => None,
            Some(read) => match session.request(read).await {
                Ok((data, _)) => parse_limit(&data),
                Err(ZkError::NoNode) => return Ok(Vec::new()),
                Err(e) => return Err(error::map(&format!("read {dir}"), e)),
            },
        };
        let entering = match entering {
            None => false,
            Some(listing) => match session.request(listing).await {
                Ok(children) => !children.is_empty(),
                Err(ZkError::NoNode) => false,
                Err(e) => return Err(error::map(&format!("list the mutex beside {dir}"), e)),
            },
        };
        let children = match session.request(listing).await {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(error::map(&format!("list {dir}"), e)),
        };
        let nodes = object.layout().queue(&children);
        let (held, limit) = match object {
            Object::Lock(_) => (lock_holders(&nodes), None),
            Object::Semaphore => (first(&nodes, limit.unwrap_or(0) as usize), limit),
            Object::Leases => {
                let count = nodes.len() - usize::from(entering && !nodes.is_empty());
                (first(&nodes, count), u32::try_from(count).ok())
            }
        };
        if let Some(found) = read_nodes(session, dir, &held, object.layout(), limit).await? {
            return Ok(found);
        }
    }
    Err(LockError::Unavailable {
        message: format!("the holders of {dir} kept changing while being read"),
        source: None,
    })
}

/// The `locks` mutex directory beside a Curator `leases` directory.
fn locks_beside(leases: &str) -> String {
    let parent = &leases[..leases.rfind('/').unwrap_or(0)];
    format!("{parent}/{}", crate::curator::semaphore::LOCKS_DIR)
}

/// The first `count` of `nodes`.
fn first<'q, 'a>(nodes: &'q [NodeName<'a>], count: usize) -> Vec<&'q NodeName<'a>> {
    nodes.iter().take(count).collect()
}

/// Reads the nodes `held` in `dir` as holders (permits under `limit`, for
/// permit nodes); `None` if one was released meanwhile (look again).
async fn read_nodes(
    session: &Session,
    dir: &str,
    held: &[&NodeName<'_>],
    layout: Layout,
    limit: Option<u32>,
) -> Result<Option<Vec<HolderNode>>, LockError> {
    let client = session.client();
    let paths: Vec<String> = held.iter().map(|n| format!("{dir}/{}", n.name)).collect();
    let reads: Vec<_> = paths
        .iter()
        .map(|path| session.request(client.get_data(path)))
        .collect();
    let mut found = Vec::with_capacity(held.len());
    for ((node, path), read) in held.iter().zip(paths).zip(reads) {
        match read.await {
            Ok((data, stat)) => {
                let mut info = layout.lock_info(node, &data, stat.czxid);
                if let (NodeKind::Permit, Some(limit)) = (node.kind, limit) {
                    info = info.with_kind(HoldKind::Permit { limit });
                }
                found.push(HolderNode { path, info });
            }
            // Released between the listing and the read.
            Err(ZkError::NoNode) => return Ok(None),
            Err(e) => return Err(error::map(&format!("read {path}"), e)),
        }
    }
    Ok(Some(found))
}

/// The holders in a contenders queue: its first node if exclusive, else
/// the readers ahead of the first exclusive node.
fn lock_holders<'q, 'a>(nodes: &'q [NodeName<'a>]) -> Vec<&'q NodeName<'a>> {
    match nodes.first() {
        Some(first) if first.kind != NodeKind::Shared => vec![first],
        _ => nodes
            .iter()
            .take_while(|n| n.kind == NodeKind::Shared)
            .collect(),
    }
}
