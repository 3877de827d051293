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
}

impl Object {
    fn layout(self) -> Layout {
        match self {
            Self::Lock(layout) => layout,
            Self::Semaphore => Layout::Distlock,
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
    'again: for _ in 0..RACE_RETRIES {
        // Both requests are sent before either is awaited.
        let limit = matches!(object, Object::Semaphore).then(|| client.get_data(dir));
        let listing = client.list_children(dir);
        let limit = match limit {
            None => None,
            Some(read) => match session.request(read).await {
                Ok((data, _)) => parse_limit(&data),
                Err(ZkError::NoNode) => return Ok(Vec::new()),
                Err(e) => return Err(error::map(&format!("read {dir}"), e)),
            },
        };
        let children = match session.request(listing).await {
            Ok(children) => children,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(error::map(&format!("list {dir}"), e)),
        };
        let nodes = object.layout().queue(&children);
        let held: Vec<&NodeName<'_>> = match limit {
            None => lock_holders(&nodes),
            Some(limit) => nodes.iter().take(limit as usize).collect(),
        };
        let paths: Vec<String> = held.iter().map(|n| format!("{dir}/{}", n.name)).collect();
        let reads: Vec<_> = paths
            .iter()
            .map(|path| session.request(client.get_data(path)))
            .collect();
        let mut found = Vec::with_capacity(held.len());
        for ((node, path), read) in held.iter().zip(paths).zip(reads) {
            match read.await {
                Ok((data, stat)) => {
                    let mut info = object.layout().lock_info(node, &data, stat.czxid);
                    if let (NodeKind::Permit, Some(limit)) = (node.kind, limit) {
                        info = info.with_kind(HoldKind::Permit { limit });
                    }
                    found.push(HolderNode { path, info });
                }
                // Released between the listing and the read: look again.
                Err(ZkError::NoNode) => continue 'again,
                Err(e) => return Err(error::map(&format!("read {path}"), e)),
            }
        }
        return Ok(found);
    }
    Err(LockError::Unavailable {
        message: format!("the holders of {dir} kept changing while being read"),
        source: None,
    })
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
