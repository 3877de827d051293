//! Where locks live in etcd's key space.
//!
//! A lock's queue is every key under `distlock/<namespace>/<key>/`, where
//! `<key>` is the lock key with `%`, `/` and non-ASCII bytes
//! percent-encoded, so that it is exactly one path segment: the queue of
//! `a` (`…/a/`) never contains the entries of `a/b` (`…/a%2Fb/…`), and no
//! two keys share an encoding.
//! Each acquisition adds one entry `<lease-hex>-<n>`, where `n` tells
//! apart the acquisitions of one lock that a session makes at the same
//! time, so the same locker can queue twice for one key without taking it
//! twice (the crate README says why names are reused, not fresh).

use lock_core::{LockName, Namespace};
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

/// The first segment of every key this backend writes.
pub(crate) const ROOT: &str = "distlock";

/// Bytes escaped in a lock key: `%` (the escape itself), `/` (the segment
/// separator), and — by `utf8_percent_encode` itself — controls and every
/// non-ASCII byte, which keeps `etcdctl` output plain ASCII.
const SEGMENT: &AsciiSet = &CONTROLS.add(b'%').add(b'/');

/// The prefix of every key of `namespace`, ending in `/`:
/// `distlock/<namespace>/`. Namespaces never contain `/`, so no other
/// namespace's keys start with it.
pub(crate) fn namespace_prefix(namespace: &Namespace) -> Vec<u8> {
    format!("{ROOT}/{namespace}/").into_bytes()
}

/// The prefix under which the queue of `name` lives, ending in `/`.
pub(crate) fn queue_prefix(name: &LockName) -> Vec<u8> {
    let key = utf8_percent_encode(name.key().as_str(), SEGMENT);
    let mut prefix = namespace_prefix(name.namespace());
    prefix.extend_from_slice(format!("{key}/").as_bytes());
    prefix
}

/// The prefix of the queue of `name`'s semaphore, ending in `/`:
/// `distlock/<namespace>/<key>%permits/`. An encoded key never contains
/// `%p`, so this segment is no lock's.
pub(crate) fn permits_prefix(name: &LockName) -> Vec<u8> {
    let mut prefix = queue_prefix(name);
    prefix.pop();
    prefix.extend_from_slice(b"%permits/");
    prefix
}

/// The key holding the limit of `name`'s semaphore (beside its queue, not
/// in it): `distlock/<namespace>/<key>%limit`.
pub(crate) fn limit_key(name: &LockName) -> Vec<u8> {
    let mut key = queue_prefix(name);
    key.pop();
    key.extend_from_slice(b"%limit");
    key
}

/// Queue entry number `n` under `prefix` of the session with lease `lease`.
#[cfg(test)]
pub(crate) fn queue_entry(prefix: &[u8], lease: i64, n: u32) -> Vec<u8> {
    queue_entry_marked(prefix, lease, n, "")
}

/// What ends the name of a reader's entry (`<lease>-<n>r`); other entries
/// end in a digit.
pub(crate) const READER_MARK: &str = "r";

/// Queue entry number `n`, its name followed by `mark` ([`READER_MARK`]
/// for readers, empty for everyone else).
pub(crate) fn queue_entry_marked(prefix: &[u8], lease: i64, n: u32, mark: &str) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(format!("{lease:016x}-{n}{mark}").as_bytes());
    key
}

/// Whether the entry `key` is a reader's.
pub(crate) fn is_reader(key: &[u8]) -> bool {
    key.ends_with(READER_MARK.as_bytes())
}

/// The end of the key range of everything starting with `prefix` (etcd's
/// "prefix" range end: the prefix with its last byte incremented).
#[cfg(test)]
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::LockKey;

    fn name(key: &str) -> LockName {
        LockName::new(Namespace::new("ns").unwrap(), LockKey::new(key).unwrap())
    }

    fn prefix(key: &str) -> String {
        String::from_utf8(queue_prefix(&name(key))).unwrap()
    }

    #[test]
    fn keys_are_one_segment() {
        assert_eq!(prefix("a"), "distlock/ns/a/");
        assert_eq!(prefix("a/b"), "distlock/ns/a%2Fb/");
        assert_eq!(prefix("a%2Fb"), "distlock/ns/a%252Fb/");
        assert_eq!(prefix("ü ü"), "distlock/ns/%C3%BC %C3%BC/");
    }

    #[test]
    fn no_queue_range_contains_another_queue() {
        let keys = [
            "a", "a/b", "a/b/c", "ab", "a%2Fb", "a b", "a.", ".", "..", "a/../b",
        ];
        for outer in keys {
            let start = queue_prefix(&name(outer));
            let end = prefix_end(&start);
            for inner in keys.iter().filter(|k| **k != outer) {
                let entry = queue_entry(&queue_prefix(&name(inner)), 7, 0);
                let inside = entry >= start && entry < end;
                assert!(!inside, "queue of {outer:?} contains an entry of {inner:?}");
            }
        }
    }

    #[test]
    fn a_namespace_prefix_holds_its_keys_and_no_others() {
        let ns = namespace_prefix(&Namespace::new("ns").unwrap());
        assert_eq!(ns, b"distlock/ns/");
        for key in ["a", "a/b", "%", "ü"] {
            let n = name(key);
            for owned in [queue_prefix(&n), permits_prefix(&n), limit_key(&n)] {
                assert!(owned.starts_with(&ns), "{owned:?}");
            }
        }
        let longer = LockName::new(Namespace::new("ns2").unwrap(), LockKey::new("a").unwrap());
        assert!(!queue_prefix(&longer).starts_with(&ns));
    }

    #[test]
    fn a_semaphore_lives_beside_its_lock() {
        let n = name("a/b");
        assert_eq!(permits_prefix(&n), b"distlock/ns/a%2Fb%permits/");
        assert_eq!(limit_key(&n), b"distlock/ns/a%2Fb%limit");
        let lock = queue_prefix(&n);
        assert!(!permits_prefix(&n).starts_with(&lock));
        assert!(!limit_key(&n).starts_with(&lock));
    }

    #[test]
    fn entries_name_the_lease_and_the_number() {
        let prefix = queue_prefix(&name("k"));
        let a = String::from_utf8(queue_entry(&prefix, 0xabc, 0)).unwrap();
        let b = String::from_utf8(queue_entry(&prefix, 0xabc, 12)).unwrap();
        assert_eq!(a, "distlock/ns/k/0000000000000abc-0");
        assert_eq!(b, "distlock/ns/k/0000000000000abc-12");
        let reader = queue_entry_marked(&prefix, 0xabc, 3, READER_MARK);
        assert_eq!(reader, b"distlock/ns/k/0000000000000abc-3r");
        assert!(is_reader(&reader) && !is_reader(a.as_bytes()));
    }
}
