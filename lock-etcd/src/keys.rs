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

use lock_core::LockName;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

/// The first segment of every key this backend writes.
pub(crate) const ROOT: &str = "distlock";

/// Bytes escaped in a lock key: `%` (the escape itself), `/` (the segment
/// separator), and — by `utf8_percent_encode` itself — controls and every
/// non-ASCII byte, which keeps `etcdctl` output plain ASCII.
const SEGMENT: &AsciiSet = &CONTROLS.add(b'%').add(b'/');

/// The prefix under which the queue of `name` lives, ending in `/`.
pub(crate) fn queue_prefix(name: &LockName) -> Vec<u8> {
    let key = utf8_percent_encode(name.key().as_str(), SEGMENT);
    format!("{ROOT}/{}/{key}/", name.namespace()).into_bytes()
}

/// Queue entry number `n` under `prefix` of the session with lease `lease`.
pub(crate) fn queue_entry(prefix: &[u8], lease: i64, n: u32) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(format!("{lease:016x}-{n}").as_bytes());
    key
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
    use lock_core::{LockKey, Namespace};

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
    fn entries_name_the_lease_and_the_number() {
        let prefix = queue_prefix(&name("k"));
        let a = String::from_utf8(queue_entry(&prefix, 0xabc, 0)).unwrap();
        let b = String::from_utf8(queue_entry(&prefix, 0xabc, 12)).unwrap();
        assert_eq!(a, "distlock/ns/k/0000000000000abc-0");
        assert_eq!(b, "distlock/ns/k/0000000000000abc-12");
    }
}
