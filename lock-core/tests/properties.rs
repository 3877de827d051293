//! Bad input at scale: keys, namespaces and option values drawn at random
//! (any characters, any length), thousands of cases each. Nothing panics;
//! what is accepted is kept exactly; what is refused says why.

use lock_core::url::parse_duration;
use lock_core::{LockError, LockKey, Namespace};
use proptest::prelude::*;

/// Cases per property.
const CASES: u32 = 4096;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// A key is accepted as given or refused with `InvalidKey` saying why.
    #[test]
    fn any_key_is_kept_or_refused_with_a_reason(key in "\\PC{0,600}|[\\x00-\\x1f]{0,4}") {
        match LockKey::new(&key) {
            Ok(valid) => prop_assert_eq!(valid.as_str(), key.as_str()),
            Err(LockError::InvalidKey { reason }) => prop_assert!(reason.contains("key"), "{}", reason),
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
        }
    }

    /// A namespace is accepted as given or refused saying why.
    #[test]
    fn any_namespace_is_kept_or_refused_with_a_reason(namespace in "\\PC{0,80}|[a-z:/._-]{0,70}") {
        match Namespace::new(&namespace) {
            Ok(valid) => prop_assert_eq!(valid.as_str(), namespace.as_str()),
            Err(error) => prop_assert!(error.to_string().contains("namespace"), "{}", error),
        }
    }

    /// A duration option never panics, whatever its text; what it accepts
    /// it reads back the same.
    #[test]
    fn any_duration_text_is_read_or_refused(text in "\\PC{0,30}|[0-9]{1,25}(ns|us|ms|s|m|h|d)?") {
        match parse_duration("ttl", &text) {
            Ok(duration) => {
                let again = parse_duration("ttl", &humantime::format_duration(duration).to_string());
                prop_assert_eq!(again.ok(), Some(duration));
            }
            Err(error) => prop_assert!(error.to_string().contains("ttl"), "{}", error),
        }
    }
}

#[test]
fn cases_run() {
    eprintln!("properties: 3 × {CASES} cases");
}
