//! Validated lock keys and namespaces.
//!
//! The rules are the same on every backend, so a key that works on one
//! store works on all of them:
//!
//! * a key is UTF-8, 1 to [`MAX_KEY_LEN`] bytes, with no control characters
//!   (NUL, newline, tab, DEL, ...);
//! * `/` separates hierarchy levels; empty levels (a leading or trailing `/`,
//!   or `//`) are rejected so that every key has one spelling;
//! * a namespace is 1 to [`MAX_NAMESPACE_LEN`] ASCII letters, digits, `-`,
//!   `_` or `.`, and not only dots.
//!
//! Backends encode keys where their store needs it (file names, ZooKeeper
//! paths); the encoding is theirs, the rules are these.

use std::fmt;
use std::sync::Arc;

use crate::error::LockError;

/// The longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 512;
/// The longest namespace accepted, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 64;
/// The namespace used when none is configured.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A key that passed validation. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey(Arc<str>);

impl LockKey {
    /// Validates `key`; returns [`LockError::InvalidKey`] naming the problem.
    pub fn new(key: &str) -> Result<Self, LockError> {
        validate_key(key)?;
        Ok(Self(Arc::from(key)))
    }

    /// The key as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's hierarchy levels (split at `/`), never empty.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

fn validate_key(key: &str) -> Result<(), LockError> {
    if key.is_empty() {
        return Err(LockError::invalid_key("key is empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(LockError::invalid_key(format!(
            "key is {} bytes long, the limit is {MAX_KEY_LEN}",
            key.len()
        )));
    }
    if let Some((at, c)) = key.char_indices().find(|(_, c)| c.is_control()) {
        return Err(LockError::invalid_key(format!(
            "key {} contains control character {c:?} at byte {at}",
            preview(key)
        )));
    }
    if key.starts_with('/') || key.ends_with('/') || key.contains("//") {
        return Err(LockError::invalid_key(format!(
            "key {} has an empty level: no leading or trailing `/`, no `//`",
            preview(key)
        )));
    }
    Ok(())
}

/// A short, escaped rendering of a rejected key for error messages.
fn preview(key: &str) -> String {
    const SHOWN: usize = 40;
    let mut shown: String = key.chars().take(SHOWN).collect();
    if shown.len() < key.len() {
        shown.push_str("...");
    }
    format!("{shown:?}")
}

/// `Display` as the text itself and `Debug` as the quoted text, for
/// newtypes over `Arc<str>`: [`LockKey`], [`Namespace`] and
/// [`OwnerId`](crate::OwnerId).
macro_rules! shown_as_text {
    ($($name:ty),+) => {$(
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&*self.0, f)
            }
        }
    )+};
}
pub(crate) use shown_as_text;

shown_as_text!(LockKey, Namespace);

/// A namespace that passed validation: locks in different namespaces never
/// interact, even with equal keys. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(Arc<str>);

impl Namespace {
    /// Validates `namespace`; returns [`LockError::InvalidKey`] naming the problem.
    pub fn new(namespace: &str) -> Result<Self, LockError> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if namespace.is_empty() || namespace.len() > MAX_NAMESPACE_LEN {
            return Err(LockError::invalid_key(format!(
                "namespace must be 1 to {MAX_NAMESPACE_LEN} bytes, got {}",
                namespace.len()
            )));
        }
        if !namespace.chars().all(allowed) || namespace.chars().all(|c| c == '.') {
            return Err(LockError::invalid_key(format!(
                "namespace {} may only use ASCII letters, digits, `-`, `_` and `.` (not only dots)",
                preview(namespace)
            )));
        }
        Ok(Self(Arc::from(namespace)))
    }

    /// The namespace as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The namespace as a shared string (a reference count, no copy).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn shared(&self) -> Arc<str> {
        Arc::clone(&self.0)
    }
}

impl Default for Namespace {
    fn default() -> Self {
        Self(Arc::from(DEFAULT_NAMESPACE))
    }
}

/// The full name of a lock in a store: its namespace and key.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName {
    namespace: Namespace,
    key: LockKey,
}

impl LockName {
    /// Joins a namespace and a key.
    pub fn new(namespace: Namespace, key: LockKey) -> Self {
        Self { namespace, key }
    }

    /// Validates both parts.
    pub fn parse(namespace: &str, key: &str) -> Result<Self, LockError> {
        Ok(Self::new(Namespace::new(namespace)?, LockKey::new(key)?))
    }

    /// The namespace part.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The key part.
    pub fn key(&self) -> &LockKey {
        &self.key
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.namespace, self.key)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}:{:?}", self.namespace, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(key: &str) -> String {
        match LockKey::new(key) {
            Err(LockError::InvalidKey { reason }) => reason,
            other => panic!("key {key:?} should be rejected, got {other:?}"),
        }
    }

    #[test]
    fn accepts_hierarchy_spaces_unicode_and_max_length() {
        for key in [
            "a",
            "invoices/2026-11",
            "with space",
            "ünïcødé/鍵",
            "a/../b",
            ".",
        ] {
            assert_eq!(LockKey::new(key).unwrap().as_str(), key);
        }
        let longest = "k".repeat(MAX_KEY_LEN);
        assert!(LockKey::new(&longest).is_ok());
    }

    #[test]
    fn rejects_empty_long_control_and_empty_levels() {
        assert!(rejected("").contains("empty"));
        assert!(rejected(&"k".repeat(MAX_KEY_LEN + 1)).contains("513 bytes"));
        assert!(rejected("a\0b").contains("'\\0'"));
        assert!(rejected("a\nb").contains("control"));
        assert!(rejected("a\u{7f}").contains("control"));
        for key in ["/a", "a/", "a//b", "/"] {
            assert!(rejected(key).contains("empty level"), "{key}");
        }
    }

    #[test]
    fn error_preview_is_short_and_escaped() {
        let key = format!("{}\u{1}", "x".repeat(100));
        let reason = rejected(&key);
        assert!(reason.len() < 120, "{reason}");
        assert!(reason.contains("..."));
    }

    #[test]
    fn namespaces_are_restricted() {
        assert!(Namespace::new("billing-prod_2.eu").is_ok());
        for bad in ["", "a/b", "a b", "..", "ä", &"n".repeat(65)] {
            assert!(Namespace::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Namespace::default().as_str(), DEFAULT_NAMESPACE);
    }

    #[test]
    fn segments_split_at_slash() {
        let key = LockKey::new("a/b/c").unwrap();
        assert_eq!(key.segments().collect::<Vec<_>>(), ["a", "b", "c"]);
    }
}
