//! Lock names → znode paths.
//!
//! A lock lives in its own directory of znodes:
//!
//! ```text
//! <base>/<namespace>/<key segment>/…/<key segment>/_locks/lock-<guid>-<sequence>
//! <base>/<namespace>/<key segment>/…/<key segment>/_locks/read-<guid>-<sequence>
//! <base>/<namespace>/<key segment>/…/<key segment>/_permits/permit-<guid>-<sequence>
//! ```
//!
//! Readers (`read-`) queue with the exclusive contenders (`lock-`) in one
//! directory, so they share its sequence counter; a semaphore's permits
//! live in the sibling [`PERMITS_DIR`], whose data is the limit.
//!
//! The key's `/` levels stay levels, so an operator browsing the tree sees
//! the key hierarchy. Contenders live in the child directory
//! [`CONTENDERS_DIR`], never directly in the key's directory: the lock
//! directory of key `a` (`…/a/_locks`) therefore never holds anything of key
//! `a/b` (`…/a/b/_locks`). No key segment can be spelled `_locks`, because
//! [`encode_segment`] escapes a leading `_`.
//!
//! Each segment is percent-encoded where ZooKeeper would reject it or where
//! it could clash: `%` itself, a leading `_`, the segments `.` and `..`,
//! control characters, and everything ZooKeeper's Java server forbids in a
//! path — which, since Java strings are UTF-16, includes every character
//! outside the Basic Multilingual Plane (an emoji is a surrogate pair, and
//! surrogates are forbidden). The encoding is reversible
//! (`decode_segment` in the tests) and injective, so distinct keys get distinct paths.

use std::fmt::Write as _;

use lock_core::{LockName, Namespace};

/// The directory, under a key's directory, that holds its contenders.
pub(crate) const CONTENDERS_DIR: &str = "_locks";
/// The name prefix of a contender node, followed by `<guid>-` and the
/// sequence number ZooKeeper appends.
pub(crate) const NODE_PREFIX: &str = "lock-";
/// The name prefix of a reader's node in the contenders directory; it
/// takes its sequence number from the same counter as [`NODE_PREFIX`]
/// nodes, so readers and exclusive contenders form one queue.
pub(crate) const READ_PREFIX: &str = "read-";
/// The directory, under a key's directory, that holds its semaphore's
/// permit nodes; its data is the semaphore's limit.
pub(crate) const PERMITS_DIR: &str = "_permits";
/// The name prefix of a permit node in [`PERMITS_DIR`].
pub(crate) const PERMIT_PREFIX: &str = "permit-";

/// The limit a permits directory's data holds, if any.
pub(crate) fn parse_limit(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data).ok()?.parse().ok()
}

/// What a node in a contenders or permits directory stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// An exclusive contender (lock, leadership, write lock): `lock-`.
    Exclusive,
    /// A reader of the name's lock: `read-`.
    Shared,
    /// A permit of the name's semaphore: `permit-`.
    Permit,
}

impl NodeKind {
    /// The node name prefix of this kind.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Self::Exclusive => NODE_PREFIX,
            Self::Shared => READ_PREFIX,
            Self::Permit => PERMIT_PREFIX,
        }
    }
}

/// The base path used when the URL names no chroot.
pub const DEFAULT_BASE: &str = "/distlock";

/// The contenders directory of lock `name` under `base` (an absolute path
/// without a trailing `/`).
pub(crate) fn lock_dir(base: &str, name: &LockName) -> String {
    object_dir(base, name, CONTENDERS_DIR)
}

/// The permits directory of the semaphore of `name` under `base`: a
/// sibling of its contenders directory.
pub(crate) fn permits_dir(base: &str, name: &LockName) -> String {
    object_dir(base, name, PERMITS_DIR)
}

/// The directory of every lock of `namespace` under `base`: the root of
/// the subtree [`Backend::purge_namespace`] removes.
///
/// [`Backend::purge_namespace`]: lock_core::backend::Backend::purge_namespace
pub(crate) fn namespace_dir(base: &str, namespace: &Namespace) -> String {
    // Namespaces are restricted to [A-Za-z0-9._-] and are never only dots,
    // so they are valid znode names as they are.
    format!("{base}/{}", namespace.as_str())
}

fn object_dir(base: &str, name: &LockName, leaf: &str) -> String {
    let mut path = String::with_capacity(base.len() + name.key().as_str().len() + 32);
    path.push_str(&namespace_dir(base, name.namespace()));
    for segment in name.key().segments() {
        path.push('/');
        path.push_str(&encode_segment(segment));
    }
    path.push('/');
    path.push_str(leaf);
    path
}

/// The path prefix a node of `kind` with id `guid` creates in `dir`;
/// ZooKeeper appends the sequence number.
pub(crate) fn kind_prefix(dir: &str, kind: NodeKind, guid: &str) -> String {
    format!("{dir}/{}{guid}-", kind.prefix())
}

/// A contender node's name split into its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeName<'a> {
    /// The name as listed (`lock-<guid>-<sequence>`, `read-…`, `permit-…`).
    pub(crate) name: &'a str,
    /// What the node stands for, from its prefix.
    pub(crate) kind: NodeKind,
    /// The contender's id.
    pub(crate) guid: &'a str,
    /// The sequence number ZooKeeper assigned; the lowest holds the lock.
    pub(crate) sequence: i64,
}

/// Parses a child of a contenders directory; `None` for anything that is
/// not a contender node (so foreign nodes never take part in the queue).
pub(crate) fn parse_node(name: &str) -> Option<NodeName<'_>> {
    let (kind, rest) = [NodeKind::Exclusive, NodeKind::Shared, NodeKind::Permit]
        .into_iter()
        .find_map(|kind| Some((kind, name.strip_prefix(kind.prefix())?)))?;
    let (guid, sequence) = rest.rsplit_once('-')?;
    if guid.is_empty() || sequence.is_empty() || !sequence.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(NodeName {
        name,
        kind,
        guid,
        sequence: sequence.parse().ok()?,
    })
}

/// The contender nodes among `children`, lowest sequence (the holder) first.
/// (Readers and exclusive contenders live in a contenders directory,
/// permits in a permits directory; each directory holds one queue.)
pub(crate) fn queue(children: &[String]) -> Vec<NodeName<'_>> {
    let mut nodes: Vec<_> = children.iter().filter_map(|c| parse_node(c)).collect();
    nodes.sort_by_key(|node| node.sequence);
    nodes
}

/// Encodes one key segment as a valid, collision-free znode name; see the
/// module docs.
pub(crate) fn encode_segment(segment: &str) -> String {
    if segment == "." || segment == ".." {
        return "%2E".repeat(segment.len());
    }
    let mut encoded = String::with_capacity(segment.len());
    for (at, c) in segment.char_indices() {
        if needs_escape(c) || (at == 0 && c == '_') {
            let mut bytes = [0u8; 4];
            for byte in c.encode_utf8(&mut bytes).bytes() {
                let _ = write!(encoded, "%{byte:02X}");
            }
        } else {
            encoded.push(c);
        }
    }
    encoded
}

/// Reverses [`encode_segment`]; `None` if `encoded` is not its output.
#[cfg(test)]
fn decode_segment(encoded: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut rest = encoded.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' {
            let hex = tail.get(..2)?;
            let hex = std::str::from_utf8(hex).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// Characters escaped anywhere in a segment: the escape character, and
/// what ZooKeeper's `PathUtils.validatePath` rejects (by UTF-16 code unit).
fn needs_escape(c: char) -> bool {
    let u = u32::from(c);
    c == '%'
        || c == '/'
        || c.is_control()
        || (0xd800..=0xf8ff).contains(&u)
        || (0xfff0..=0xffff).contains(&u)
        || u > 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(key: &str) -> LockName {
        LockName::parse("ns", key).unwrap()
    }

    #[test]
    fn every_object_of_a_namespace_lives_under_its_dir() {
        let ns = namespace_dir("/base", &Namespace::new("ns").unwrap());
        assert_eq!(ns, "/base/ns");
        for key in ["a", "a/b", "_x", "..", "ü"] {
            for dir in [
                lock_dir("/base", &name(key)),
                permits_dir("/base", &name(key)),
            ] {
                assert!(dir.starts_with(&format!("{ns}/")), "{dir}");
            }
        }
        let other = namespace_dir("/base", &Namespace::new("ns2").unwrap());
        assert!(!lock_dir("/base", &name("a")).starts_with(&format!("{other}/")));
    }

    #[test]
    fn hierarchy_is_kept_and_contenders_sit_in_their_own_dir() {
        assert_eq!(lock_dir("/base", &name("a")), "/base/ns/a/_locks");
        assert_eq!(lock_dir("/base", &name("a/b")), "/base/ns/a/b/_locks");
        assert_eq!(
            lock_dir("/distlock", &name("invoices/2026-11")),
            "/distlock/ns/invoices/2026-11/_locks"
        );
    }

    #[test]
    fn no_key_reaches_into_another_keys_contenders() {
        // `a/_locks` would otherwise be a child of key a's contenders dir.
        let a = lock_dir("/b", &name("a"));
        for key in ["a/_locks", "a/_locks/x", "_locks", "a/b"] {
            let other = lock_dir("/b", &name(key));
            assert!(!other.starts_with(&format!("{a}/")), "{key} -> {other}");
            assert_ne!(other, a);
        }
    }

    #[test]
    fn segments_are_escaped_as_documented() {
        for (segment, encoded) in [
            // A leading `_` is escaped, so no key segment is `_locks`.
            ("_locks", "%5Flocks"),
            ("a_b", "a_b"),
            (".", "%2E"),
            ("..", "%2E%2E"),
            ("🔒", "%F0%9F%94%92"),
        ] {
            assert_eq!(encode_segment(segment), encoded, "{segment:?}");
        }
    }

    #[test]
    fn forbidden_and_relative_segments_are_encoded_reversibly() {
        let samples = [
            ".",
            "..",
            "...",
            ".hidden",
            "a%2Fb",
            "100%",
            "ünïcødé",
            "鍵 🔒",
            "\u{e000}private\u{f8ff}",
            "\u{fff0}special\u{ffff}",
            "tab\\t and \"quotes\" {braces}:colon*star?",
            "_leading",
            "plain",
        ];
        for segment in samples {
            let encoded = encode_segment(segment);
            assert_ne!(encoded, ".");
            assert_ne!(encoded, "..");
            for c in encoded.chars() {
                assert!(!needs_escape(c) || c == '%', "{segment:?} -> {encoded:?}");
            }
            assert_eq!(decode_segment(&encoded).as_deref(), Some(segment));
        }
    }

    #[test]
    fn distinct_keys_get_distinct_paths() {
        let keys = [
            "a/../b",
            "a/%2E%2E/b",
            "a%2Fb",
            "a/b",
            "Key",
            "key",
            "%25",
            "%",
        ];
        let mut paths: Vec<_> = keys.iter().map(|k| lock_dir("/x", &name(k))).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), keys.len());
    }

    #[test]
    fn contender_names_parse_and_sort_by_sequence() {
        let children: Vec<String> = [
            "lock-bbb-0000000010",
            "lock-aaa-0000000002",
            "foreign",
            "lock--0000000001",
            "lock-ccc-12x",
            "lock-a-b-0000000005",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let queue = queue(&children);
        let seen: Vec<_> = queue.iter().map(|n| (n.guid, n.sequence)).collect();
        assert_eq!(seen, [("aaa", 2), ("a-b", 5), ("bbb", 10)]);
        assert_eq!(kind_prefix("/d", NodeKind::Exclusive, "g"), "/d/lock-g-");
        assert_eq!(kind_prefix("/d", NodeKind::Shared, "g"), "/d/read-g-");
        let mixed: Vec<String> = ["read-r-0000000003", "lock-w-0000000002", "permit-p-1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let kinds: Vec<_> = super::queue(&mixed)
            .iter()
            .map(|n| (n.kind, n.sequence))
            .collect();
        assert_eq!(
            kinds,
            [
                (NodeKind::Permit, 1),
                (NodeKind::Exclusive, 2),
                (NodeKind::Shared, 3)
            ]
        );
        assert_eq!(permits_dir("/b", &name("a")), "/b/ns/a/_permits");
    }
}
