//! Redis key and channel names of a lock.
//!
//! A lock `(namespace, key)` lives in `distlock:{<ns>:<key>}`, its fencing
//! counter in `distlock:{<ns>:<key>}:token`, and its releases are published
//! on `distlock:{<ns>:<key>}:released`. The part in braces is a Redis
//! Cluster hash tag, so a lock and its counter share a slot and one script
//! can touch both.
//!
//! Namespace and key are percent-encoded for `%`, `{` and `}`: a key with a
//! `}` would otherwise end the hash tag early (every key with the same
//! prefix would crowd into one slot), and the encoding stays injective
//! (distinct locks never share a Redis key).

use lock_core::LockName;

/// The Redis names of one lock.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LockKeys {
    /// The lock itself: a string `"<token> <owner>"` with a PX expiry.
    pub(crate) lock: String,
    /// The fencing token counter (never expires).
    pub(crate) token: String,
    /// The pub/sub channel its releases are announced on.
    pub(crate) channel: String,
}

impl LockKeys {
    pub(crate) fn new(name: &LockName) -> Self {
        let mut lock = String::from("distlock:{");
        encode_into(&mut lock, name.namespace().as_str());
        lock.push(':');
        encode_into(&mut lock, name.key().as_str());
        lock.push('}');
        Self {
            token: format!("{lock}:token"),
            channel: format!("{lock}:released"),
            lock,
        }
    }
}

fn encode_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::{LockKey, Namespace};

    fn keys(ns: &str, key: &str) -> LockKeys {
        LockKeys::new(&LockName::new(
            Namespace::new(ns).unwrap(),
            LockKey::new(key).unwrap(),
        ))
    }

    /// The hash tag as Redis Cluster computes it: between the first `{`
    /// and the next `}`.
    fn hash_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = key[open + 1..].find('}').unwrap() + open + 1;
        &key[open + 1..close]
    }

    #[test]
    fn layout() {
        let k = keys("billing", "invoices/2026");
        assert_eq!(k.lock, "distlock:{billing:invoices/2026}");
        assert_eq!(k.token, "distlock:{billing:invoices/2026}:token");
        assert_eq!(k.channel, "distlock:{billing:invoices/2026}:released");
    }

    #[test]
    fn braces_stay_inside_the_hash_tag() {
        let k = keys("ns", "a}b{c%7D");
        assert_eq!(hash_tag(&k.lock), "ns:a%7Db%7Bc%257D");
        assert_eq!(hash_tag(&k.lock), hash_tag(&k.token));
    }

    #[test]
    fn encoding_is_injective() {
        let names = [
            ("a", "b}"),
            ("a", "b%7D"),
            ("a", "b"),
            ("a", "b}:token"),
            ("a.b", "c"),
            ("a", "b.c"),
        ];
        let mut seen = std::collections::HashSet::new();
        for (ns, key) in names {
            let k = keys(ns, key);
            assert!(seen.insert(k.lock.clone()), "{ns}/{key}");
            assert!(seen.insert(k.token.clone()), "{ns}/{key}");
        }
    }
}
