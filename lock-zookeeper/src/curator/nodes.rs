//! Curator's node names: `_c_<uuid>-<marker><sequence>`, in Curator's
//! order, and which recipe a node belongs to.
//!
//! Curator creates every recipe node in "protected" mode: the name starts
//! with `_c_`, a UUID (36 characters with dashes) and `-`, so a client
//! whose create reply was lost finds its node by that prefix. Then comes
//! the recipe's marker and the 10-digit sequence number ZooKeeper
//! appends. Curator orders a directory's children by the text after the
//! last marker in each name (plain string order; the sequence numbers are
//! zero-padded, so that is their numeric order); children without a
//! marker are no recipe's node and take no part here.

use crate::names::{NodeKind, NodeName};

/// The prefix of a protected node's name.
pub(crate) const PROTECTED_PREFIX: &str = "_c_";

/// One Curator recipe, as its nodes show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recipe {
    /// InterProcessMutex (and LeaderSelector): `lock-` nodes.
    Mutex,
    /// LeaderLatch: `latch-` nodes.
    Latch,
    /// InterProcessReadWriteLock: `__READ__` and `__WRIT__` nodes.
    ReadWrite,
    /// InterProcessSemaphoreV2's leases: `lease-` nodes in `leases/`.
    Semaphore,
}

impl Recipe {
    /// The recipe's name in messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Mutex => {
                "InterProcessMutex/LeaderSelector or kazoo Lock (`lock-`/`__lock__` nodes)"
            }
            Self::Latch => "LeaderLatch (`latch-` nodes)",
            Self::ReadWrite => "InterProcessReadWriteLock (`__READ__`/`__WRIT__` nodes)",
            Self::Semaphore => "InterProcessSemaphoreV2 (`leases`/`locks` children)",
        }
    }
}

/// A node marker: the text before the sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Marker {
    /// The text itself.
    pub(crate) text: &'static str,
    /// Whose nodes carry it.
    pub(crate) recipe: Recipe,
    /// How such a node holds.
    pub(crate) kind: NodeKind,
}

/// InterProcessMutex's (and LeaderSelector's) marker.
pub(crate) const LOCK: Marker = Marker {
    text: "lock-",
    recipe: Recipe::Mutex,
    kind: NodeKind::Exclusive,
};
/// kazoo's `Lock` marker (`<uuid hex>__lock__<seq>`, no protected
/// prefix). kazoo joins Curator's mutex when told to see `-lock-` nodes
/// (`extra_lock_patterns=["-lock-"]`); counting its nodes here, in their
/// sequence order, makes distlock wait for kazoo's holders too. (Curator
/// itself sorts them by their whole name, so Curator and kazoo do not mix.)
pub(crate) const KAZOO_LOCK: Marker = Marker {
    text: "__lock__",
    recipe: Recipe::Mutex,
    kind: NodeKind::Exclusive,
};
/// LeaderLatch's marker.
pub(crate) const LATCH: Marker = Marker {
    text: "latch-",
    recipe: Recipe::Latch,
    kind: NodeKind::Exclusive,
};
/// A read lock's marker (no dash before the sequence).
pub(crate) const READ: Marker = Marker {
    text: "__READ__",
    recipe: Recipe::ReadWrite,
    kind: NodeKind::Shared,
};
/// A write lock's marker (no dash before the sequence).
pub(crate) const WRITE: Marker = Marker {
    text: "__WRIT__",
    recipe: Recipe::ReadWrite,
    kind: NodeKind::Exclusive,
};
/// A semaphore lease's marker.
pub(crate) const LEASE: Marker = Marker {
    text: "lease-",
    recipe: Recipe::Semaphore,
    kind: NodeKind::Permit,
};

const MARKERS: [Marker; 6] = [LOCK, KAZOO_LOCK, LATCH, READ, WRITE, LEASE];

/// The path prefix our node with id `guid` and `marker` is created with
/// in `dir`; ZooKeeper appends the sequence number.
pub(crate) fn node_prefix(dir: &str, marker: Marker, guid: &str) -> String {
    format!("{dir}/{PROTECTED_PREFIX}{guid}-{}", marker.text)
}

/// A recipe node's name parsed, with its marker; `None` for a child that
/// is no recipe's node.
pub(crate) fn parse(name: &str) -> Option<(Marker, NodeName<'_>)> {
    let (marker, at) = MARKERS
        .iter()
        .filter_map(|marker| Some((*marker, name.rfind(marker.text)?)))
        .max_by_key(|(_, at)| *at)?;
    let sequence = &name[at + marker.text.len()..];
    if sequence.is_empty() || !sequence.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let guid = name[..at]
        .strip_prefix(PROTECTED_PREFIX)
        .and_then(|rest| rest.strip_suffix('-'))
        .unwrap_or("");
    let node = NodeName {
        name,
        kind: marker.kind,
        guid,
        sequence: sequence.parse().ok()?,
    };
    Some((marker, node))
}

/// Every recipe node among `children`, in Curator's order (first in line
/// first).
pub(crate) fn queue(children: &[String]) -> Vec<NodeName<'_>> {
    let mut nodes: Vec<_> = children
        .iter()
        .filter_map(|child| parse(child).map(|(_, node)| node))
        .collect();
    nodes.sort_by_key(|node| node.sequence);
    nodes
}

/// The first recipe among `children` other than `ours`, if any: a
/// directory another recipe uses.
pub(crate) fn other_recipe(children: &[String], ours: Recipe) -> Option<Recipe> {
    children
        .iter()
        .filter_map(|child| parse(child).map(|(marker, _)| marker.recipe))
        .find(|recipe| *recipe != ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    const UUID: &str = "0f8d2a4e-1b3c-4d5e-8f90-a1b2c3d4e5f6";

    #[test]
    fn protected_names_parse_with_their_uuid_and_sequence() {
        let name = format!("_c_{UUID}-lock-0000000012");
        let (marker, node) = parse(&name).unwrap();
        assert_eq!(marker, LOCK);
        assert_eq!((node.guid, node.sequence), (UUID, 12));
        let name = format!("_c_{UUID}-__READ__0000000003");
        let (marker, node) = parse(&name).unwrap();
        assert_eq!(
            (marker, node.kind, node.sequence),
            (READ, NodeKind::Shared, 3)
        );
        assert_eq!(parse("latch-0000000001").unwrap().1.guid, "");
        let (marker, node) = parse("9f2c41d0aa3e4d41b5a3c9e0f1d2a3b4__lock__0000000007").unwrap();
        assert_eq!((marker, node.guid, node.sequence), (KAZOO_LOCK, "", 7));
        for foreign in ["sub", "leases", "locks", "lock-", "lock-12x", "_c_x-lock-"] {
            assert!(parse(foreign).is_none(), "{foreign}");
        }
        assert_eq!(
            node_prefix("/a", WRITE, UUID),
            format!("/a/_c_{UUID}-__WRIT__")
        );
    }

    #[test]
    fn nodes_sort_by_sequence_and_other_recipes_are_named() {
        let children = listing(&[
            "_c_b-__WRIT__0000000010",
            "sub",
            "_c_a-__READ__0000000002",
            "_c_c-__READ__0000000011",
        ]);
        let order: Vec<_> = queue(&children).iter().map(|n| n.sequence).collect();
        assert_eq!(order, [2, 10, 11]);
        assert_eq!(other_recipe(&children, Recipe::ReadWrite), None);
        assert_eq!(
            other_recipe(&children, Recipe::Mutex),
            Some(Recipe::ReadWrite)
        );
        let kazoo = listing(&["_c_a-lock-0000000004", "9f2c__lock__0000000003"]);
        let order: Vec<_> = queue(&kazoo).iter().map(|n| n.sequence).collect();
        assert_eq!(order, [3, 4], "kazoo's node takes its place in line");
        assert_eq!(other_recipe(&kazoo, Recipe::Mutex), None);
        let latch = listing(&["_c_a-latch-0000000001", "nested"]);
        assert_eq!(other_recipe(&latch, Recipe::Mutex), Some(Recipe::Latch));
    }
}
