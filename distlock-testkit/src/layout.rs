//! Where each store keeps a lock, as its README documents it, so a test
//! can look at or meddle with a lock from outside distlock with a raw
//! client: read a queue, delete a holder's entry, revoke its lease.
//!
//! Computed here from the documented format, not taken from the store
//! crates (their naming code is private): a store that changed its layout
//! would fail the tests that act from outside, which is the point.
//!
//! | store | a lock `(ns, key)` lives in |
//! | --- | --- |
//! | Redis | `distlock:{<ns>:<key>}` and the same with `:queue`, `:waiters`, `:released`; `%`, `{`, `}` percent-encoded; the fencing counter `distlock:{<ns>:}:token` is the namespace's (one per slot on a cluster) |
//! | etcd | one entry per acquisition under `distlock/<ns>/<key>/`; `%`, `/` and non-ASCII bytes of the key percent-encoded |
//! | ZooKeeper | nodes `lock-<id>-<sequence>` in `<base>/<ns>/<segment>/…/_locks`, each key level a node, lowest sequence holding |

use lock_core::LockName;

/// The base path of ZooKeeper locks when the URL names none.
pub const ZK_DEFAULT_BASE: &str = "/distlock";

/// The Redis keys and channel of one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisKeys {
    /// The lock: `"<token> <owner>"` with an expiry.
    pub lock: String,
    /// The fencing token counter, shared by the namespace's locks on one
    /// server, a Sentinel master or a Redlock master (a cluster has one
    /// per namespace and slot, named otherwise).
    pub token: String,
    /// The waiters' owner ids, in order of arrival (a list).
    pub queue: String,
    /// Each waiter's liveness deadline, lease and grant channel (a hash
    /// keyed by owner id).
    pub waiters: String,
    /// The channel releases are announced on (Redlock).
    pub released: String,
}

impl RedisKeys {
    /// The keys of lock `name`. The part in braces is the Redis Cluster
    /// hash tag: every key of a lock is on one slot.
    pub fn of(name: &LockName) -> Self {
        let escape = |text: &str| {
            text.replace('%', "%25")
                .replace('{', "%7B")
                .replace('}', "%7D")
        };
        let lock = format!(
            "distlock:{{{}:{}}}",
            escape(name.namespace().as_str()),
            escape(name.key().as_str())
        );
        let token = format!("distlock:{{{}:}}:token", escape(name.namespace().as_str()));
        let [queue, waiters, released] =
            ["queue", "waiters", "released"].map(|suffix| format!("{lock}:{suffix}"));
        Self {
            lock,
            token,
            queue,
            waiters,
            released,
        }
    }
}

/// The etcd key prefix, ending in `/`, under which the queue of lock
/// `name` lives: one key per acquisition, the oldest (lowest create
/// revision) holding the lock.
pub fn etcd_queue_prefix(name: &LockName) -> String {
    let key: String = name
        .key()
        .as_str()
        .bytes()
        .map(|byte| match byte {
            b'%' | b'/' | ..=0x1f | 0x7f.. => format!("%{byte:02X}"),
            _ => char::from(byte).to_string(),
        })
        .collect();
    format!("distlock/{}/{key}/", name.namespace())
}

/// The ZooKeeper directory holding the contender nodes of lock `name`
/// under base path `base` (absolute, no trailing `/`).
pub fn zk_lock_dir(base: &str, name: &LockName) -> String {
    let levels: Vec<String> = name.key().segments().map(zk_level).collect();
    format!("{base}/{}/{}/_locks", name.namespace(), levels.join("/"))
}

/// One key level as a znode name: `.` and `..` spelled with escapes, and
/// `%`, a leading `_` and what ZooKeeper refuses in a path (controls,
/// private-use and special code units, anything outside the BMP)
/// percent-encoded by UTF-8 byte.
fn zk_level(level: &str) -> String {
    if level.bytes().all(|b| b == b'.') && level.len() <= 2 {
        return "%2E".repeat(level.len());
    }
    let mut out = String::new();
    for (at, c) in level.char_indices() {
        let code = u32::from(c);
        let refused = c == '%'
            || c == '/'
            || c.is_control()
            || (at == 0 && c == '_')
            || matches!(code, 0xd800..=0xf8ff | 0xfff0..);
        if refused {
            let mut utf8 = [0; 4];
            out.extend(
                c.encode_utf8(&mut utf8)
                    .bytes()
                    .map(|b| format!("%{b:02X}")),
            );
        } else {
            out.push(c);
        }
    }
    out
}

/// The contender nodes among `children` (a listing of a
/// [`zk_lock_dir`]), in queue order: `lock-<id>-<sequence>` by sequence,
/// the holder first. Other nodes are left out.
pub fn zk_contenders(children: &[String]) -> Vec<&str> {
    let mut queue: Vec<(u64, &str)> = children
        .iter()
        .filter_map(|child| {
            let (head, sequence) = child.rsplit_once('-')?;
            let id = head.strip_prefix("lock-")?;
            let digits = !sequence.is_empty() && sequence.bytes().all(|b| b.is_ascii_digit());
            let number = sequence.parse().ok().filter(|_| digits && !id.is_empty())?;
            Some((number, child.as_str()))
        })
        .collect();
    queue.sort_unstable();
    queue.into_iter().map(|(_, child)| child).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(namespace: &str, key: &str) -> LockName {
        LockName::parse(namespace, key).unwrap()
    }

    #[test]
    fn redis_keys_share_one_hash_tag_with_braces_escaped() {
        let keys = RedisKeys::of(&name("billing", "a}b{c%7D"));
        let tag = "distlock:{billing:a%7Db%7Bc%257D}";
        assert_eq!(keys.lock, tag);
        let suffixed = [keys.queue, keys.waiters, keys.released];
        let expected = ["queue", "waiters", "released"].map(|s| format!("{tag}:{s}"));
        assert_eq!(suffixed, expected);
        assert_eq!(keys.token, "distlock:{billing:}:token");
    }

    #[test]
    fn etcd_keys_are_one_segment() {
        let table = [
            ("a", "distlock/ns/a/"),
            ("a/b", "distlock/ns/a%2Fb/"),
            ("100%", "distlock/ns/100%25/"),
            ("é x", "distlock/ns/%C3%A9 x/"),
        ];
        for (key, prefix) in table {
            assert_eq!(etcd_queue_prefix(&name("ns", key)), prefix);
        }
    }

    #[test]
    fn zookeeper_levels_stay_levels_and_odd_ones_are_escaped() {
        let table = [
            ("invoices/2026", "/b/ns/invoices/2026/_locks"),
            ("./..", "/b/ns/%2E/%2E%2E/_locks"),
            ("_locks/a_b", "/b/ns/%5Flocks/a_b/_locks"),
            ("...", "/b/ns/.../_locks"),
            ("x%/🔒", "/b/ns/x%25/%F0%9F%94%92/_locks"),
        ];
        for (key, dir) in table {
            assert_eq!(zk_lock_dir("/b", &name("ns", key)), dir);
        }
    }

    #[test]
    fn zookeeper_queue_is_by_sequence_and_skips_strangers() {
        let children = [
            "lock-b-0000000010",
            "notes",
            "lock-a-0000000002",
            "lock--0000000001",
            "lock-x-12y",
            "lock-c-d-0000000005",
        ]
        .map(String::from);
        assert_eq!(
            zk_contenders(&children),
            [
                "lock-a-0000000002",
                "lock-c-d-0000000005",
                "lock-b-0000000010"
            ]
        );
    }
}
