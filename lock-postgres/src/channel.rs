//! The NOTIFY channel of a lock: `distlock_` and the first 40 hex digits
//! of SHA-256 over `<schema>:<namespace length>:<namespace><key>` — 49
//! bytes, within PostgreSQL's 63-byte identifiers however long the key.
//!
//! The schema's `channel(namespace, key)` SQL function computes the same
//! name (it is what `pg_notify` calls in the store's statements); the
//! length prefix keeps `("ab", "c")` and `("a", "bc")` apart. Several
//! keys could share a channel only through a SHA-256 collision, which
//! would cost a spurious wake-up, nothing more.

use lock_core::LockName;
use sha2::{Digest, Sha256};

use crate::schema::SchemaName;

/// The channel waiters on `name` LISTEN to, in `schema`.
pub(crate) fn channel(schema: &SchemaName, name: &LockName) -> String {
    let namespace = name.namespace().as_str();
    let mut hash = Sha256::new();
    hash.update(format!("{}:{}:", schema.as_str(), namespace.len()));
    hash.update(namespace);
    hash.update(name.key().as_str());
    let digest = hash.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("distlock_{}", &hex[..40])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_fit_an_identifier_and_tell_names_apart() {
        let schema = SchemaName::default();
        let a = channel(&schema, &LockName::parse("ab", "c").unwrap());
        let b = channel(&schema, &LockName::parse("a", "bc").unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 49);
        let long = channel(&schema, &LockName::parse("ns", &"k".repeat(512)).unwrap());
        assert!(long.len() < 64);
        let other = channel(
            &SchemaName::new("other").unwrap(),
            &LockName::parse("ab", "c").unwrap(),
        );
        assert_ne!(a, other);
    }
}
