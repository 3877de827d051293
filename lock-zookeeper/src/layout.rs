//! [`Layout`]: where a store's locks live and how their nodes are named,
//! read and written (this crate's own layout, or Apache Curator's
//! recipes, see [`crate::curator`]).

use std::borrow::Cow;
use std::fmt;

use lock_core::backend::HoldKind;
use lock_core::LockInfo;

use crate::curator;
use crate::names::{self, NodeKind, NodeName};
use crate::value;

/// The znode layout a store URL's `layout` option picks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layout {
    /// `layout=distlock` (the default): distlock's own tree,
    /// `<base>/<namespace>/<key>/_locks/…`, with the owner id in each
    /// node; see the crate docs.
    #[default]
    Distlock,
    /// `layout=curator`: Apache Curator 5.x's recipes (InterProcessMutex,
    /// LeaderLatch, InterProcessReadWriteLock, InterProcessSemaphoreV2) at
    /// `<base>/<key>`, so Curator clients and distlock exclude each other;
    /// see the README's section "Layout `curator`".
    Curator,
}

impl Layout {
    /// The URL option naming the layout.
    pub(crate) const OPTION: &'static str = "layout";

    /// The layout an option value names; an error naming the known ones
    /// otherwise.
    pub(crate) fn from_option(value: &str) -> Result<Self, String> {
        match value {
            "distlock" => Ok(Self::Distlock),
            "curator" => Ok(Self::Curator),
            other => Err(format!(
                "option `layout`: unknown layout `{other}` (known: distlock, curator)"
            )),
        }
    }

    /// A fresh contender id, as the layout's node names carry it:
    /// 32 hex digits here, a hyphenated UUID (as Curator's protected mode
    /// writes it) in Curator's.
    pub(crate) fn new_guid(self) -> String {
        let id = uuid::Uuid::new_v4();
        match self {
            Self::Distlock => id.simple().to_string(),
            Self::Curator => id.hyphenated().to_string(),
        }
    }

    /// Registers `owner` as the owner of this process's node `guid`, for
    /// layouts whose nodes do not store it (see [`curator::owners`]).
    pub(crate) fn register_owner(
        self,
        guid: &str,
        owner: &str,
    ) -> Option<curator::owners::Registered> {
        match self {
            Self::Distlock => None,
            Self::Curator => Some(curator::owners::Registered::new(guid, owner)),
        }
    }

    /// The contender nodes among `children`, first in line first.
    pub(crate) fn queue(self, children: &[String]) -> Vec<NodeName<'_>> {
        match self {
            Self::Distlock => names::queue(children),
            Self::Curator => curator::nodes::queue(children),
        }
    }

    /// A contender node's name parsed; `None` for anything else.
    pub(crate) fn parse(self, name: &str) -> Option<NodeName<'_>> {
        match self {
            Self::Distlock => names::parse_node(name),
            Self::Curator => curator::nodes::parse(name).map(|(_, node)| node),
        }
    }

    /// The holder that the node at `path` describes, from its `data` and
    /// `czxid` (see [`lock_info`](Self::lock_info)).
    pub(crate) fn holder_at(self, path: &str, data: &[u8], czxid: i64) -> LockInfo {
        let name = path.rsplit('/').next().unwrap_or(path);
        match self.parse(name) {
            Some(node) => self.lock_info(&node, data, czxid),
            None => value::lock_info(data, czxid),
        }
    }

    /// What a node of `owner` holding `value` stores.
    pub(crate) fn node_data<'a>(self, owner: &'a str, value: &'a str) -> Cow<'a, [u8]> {
        match self {
            Self::Distlock => value::node_data(owner, value),
            Self::Curator => Cow::Borrowed(value.as_bytes()),
        }
    }

    /// The holder that node `node` (data `data`, created at `czxid`)
    /// describes, holding as `kind`.
    pub(crate) fn lock_info(self, node: &NodeName<'_>, data: &[u8], czxid: i64) -> LockInfo {
        let kind = match node.kind {
            NodeKind::Shared => HoldKind::Shared,
            _ => HoldKind::Exclusive,
        };
        let info = match self {
            Self::Distlock => value::lock_info(data, czxid),
            Self::Curator => curator::owners::lock_info(node, data, czxid),
        };
        info.with_kind(kind)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Distlock => "distlock",
            Self::Curator => "curator",
        })
    }
}
