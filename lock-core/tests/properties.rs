//! Bad input at scale: keys, namespaces and option values drawn at random
//! (any characters, any length), thousands of cases each. Nothing panics;
//! what is accepted is kept exactly, and accepted exactly when the rules
//! allow it; what is refused says why. Keys and namespaces that break one
//! rule each are drawn too, and must be refused with `InvalidKey` naming
//! the rule; and the generators of arbitrary input must draw both
//! accepted and refused values, or the properties over them prove little.

use std::time::Duration;

use lock_core::url::parse_duration;
use lock_core::{LockError, LockKey, Namespace, MAX_KEY_LEN};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

/// Cases per property.
const CASES: u32 = 4096;

/// The longest namespace accepted, in bytes (lock_core's
/// `MAX_NAMESPACE_LEN`, stated again so the rule is checked, not copied).
const MAX_NAMESPACE_LEN: usize = 64;

/// The key rules, written out independently of lock-core's checks: 1 to
/// 512 bytes, no control character, no empty level.
fn key_allowed(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_KEY_LEN
        && !key.chars().any(char::is_control)
        && key.split('/').all(|level| !level.is_empty())
}

/// The namespace rules, likewise: 1 to 64 ASCII letters, digits, `-`, `_`
/// or `.`, not only dots.
fn namespace_allowed(namespace: &str) -> bool {
    (1..=MAX_NAMESPACE_LEN).contains(&namespace.len())
        && namespace
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !namespace.chars().all(|c| c == '.')
}

/// Any text as a key, often too long, sometimes only control characters.
fn any_key() -> impl Strategy<Value = String> {
    "\\PC{0,600}|[\\x00-\\x1f]{0,4}|[a-z/]{0,12}"
}

/// Any text as a namespace; often made of the allowed characters only,
/// around the length limit.
fn any_namespace() -> impl Strategy<Value = String> {
    "\\PC{0,80}|[a-z:/._-]{0,70}|[a-zA-Z0-9._-]{0,70}"
}

/// Any text as a duration.
fn any_duration_text() -> impl Strategy<Value = String> {
    "\\PC{0,30}|[0-9]{1,25}(ns|us|ms|s|m|h|d)?"
}

/// A key level: no `/`, no control character.
fn level() -> impl Strategy<Value = String> {
    "[^/\\p{Cc}]{1,24}"
}

/// A character `char::is_control` is true of: C0, DEL or C1.
fn control_char() -> impl Strategy<Value = char> {
    prop_oneof![
        (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap()),
        Just('\u{7f}'),
        (0x80u32..0xa0).prop_map(|c| char::from_u32(c).unwrap()),
    ]
}

/// A key that breaks exactly one rule, and a word the refusal must use to
/// name that rule.
fn key_breaking_a_rule() -> impl Strategy<Value = (String, &'static str)> {
    prop_oneof![
        Just((String::new(), "empty")),
        // Over the limit in bytes, made of valid levels.
        prop::collection::vec(level(), 1..40)
            .prop_map(|levels| levels.join("/"))
            .prop_filter("over the limit", |key| key.len() > MAX_KEY_LEN)
            .prop_map(|key| (key, "limit")),
        "[a-z]{513,700}".prop_map(|key| (key, "limit")),
        (level(), control_char(), level()).prop_map(|(before, c, after)| {
            let mut key: String = before.chars().take(8).collect();
            key.push(c);
            key.extend(after.chars().take(8));
            (key, "control character")
        }),
        level().prop_map(|l| (format!("/{l}"), "empty level")),
        level().prop_map(|l| (format!("{l}/"), "empty level")),
        (level(), level()).prop_map(|(a, b)| (format!("{a}//{b}"), "empty level")),
        Just(("/".to_owned(), "empty level")),
    ]
}

/// A key that keeps every rule: levels joined with `/`, at most the limit.
fn key_keeping_the_rules() -> impl Strategy<Value = String> {
    prop::collection::vec(level(), 1..10)
        .prop_map(|levels| levels.join("/"))
        .prop_filter("within the limit", |key| key.len() <= MAX_KEY_LEN)
}

/// A namespace that breaks exactly one rule.
fn namespace_breaking_a_rule() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z0-9._-]{65,90}",
        "\\.{1,64}",
        ("[a-z0-9._-]{0,20}", "[^a-zA-Z0-9._-]", "[a-z0-9._-]{0,20}")
            .prop_map(|(a, bad, b)| format!("{a}{bad}{b}")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Any text as a key is accepted exactly when the rules allow it,
    /// and then kept as given; refused with `InvalidKey` saying why.
    #[test]
    fn any_key_is_kept_or_refused_with_a_reason(key in any_key()) {
        match LockKey::new(&key) {
            Ok(valid) => {
                prop_assert!(key_allowed(&key), "{:?} was accepted", key);
                prop_assert_eq!(valid.as_str(), key.as_str());
            }
            Err(LockError::InvalidKey { reason }) => {
                prop_assert!(!key_allowed(&key), "{:?} was refused: {}", key, reason);
                prop_assert!(reason.contains("key"), "{}", reason);
            }
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
        }
    }

    /// A key breaking one rule is refused with `InvalidKey` naming it.
    #[test]
    fn a_key_breaking_a_rule_is_refused_naming_it((key, rule) in key_breaking_a_rule()) {
        match LockKey::new(&key) {
            Err(LockError::InvalidKey { reason }) => {
                prop_assert!(reason.contains(rule), "{:?}: `{}` does not say {:?}", key, reason, rule);
            }
            other => prop_assert!(false, "{:?} was not refused as invalid: {:?}", key, other),
        }
    }

    /// A key keeping every rule is accepted, kept as given, its levels
    /// those between its slashes.
    #[test]
    fn a_key_keeping_the_rules_is_kept(key in key_keeping_the_rules()) {
        let valid = LockKey::new(&key);
        prop_assert!(valid.is_ok(), "{:?} was refused: {:?}", key, valid);
        let valid = valid.unwrap();
        prop_assert_eq!(valid.as_str(), key.as_str());
        prop_assert_eq!(valid.segments().collect::<Vec<_>>(), key.split('/').collect::<Vec<_>>());
    }

    /// Any text as a namespace is accepted exactly when the rules allow
    /// it, and then kept as given; refused saying why.
    #[test]
    fn any_namespace_is_kept_or_refused_with_a_reason(namespace in any_namespace()) {
        match Namespace::new(&namespace) {
            Ok(valid) => {
                prop_assert!(namespace_allowed(&namespace), "{:?} was accepted", namespace);
                prop_assert_eq!(valid.as_str(), namespace.as_str());
            }
            Err(LockError::InvalidKey { reason }) => {
                prop_assert!(!namespace_allowed(&namespace), "{:?} was refused: {}", namespace, reason);
                prop_assert!(reason.contains("namespace"), "{}", reason);
            }
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
        }
    }

    /// A namespace breaking one rule is refused with `InvalidKey` saying
    /// it is the namespace.
    #[test]
    fn a_namespace_breaking_a_rule_is_refused(namespace in namespace_breaking_a_rule()) {
        match Namespace::new(&namespace) {
            Err(LockError::InvalidKey { reason }) => prop_assert!(reason.contains("namespace"), "{}", reason),
            other => prop_assert!(false, "{:?} was not refused as invalid: {:?}", namespace, other),
        }
    }

    /// A duration option never panics, whatever its text; what it accepts
    /// it reads back the same.
    #[test]
    fn any_duration_text_is_read_or_refused(text in any_duration_text()) {
        match parse_duration("ttl", &text) {
            Ok(duration) => {
                let again = parse_duration("ttl", &humantime::format_duration(duration).to_string());
                prop_assert_eq!(again.ok(), Some(duration));
            }
            Err(error) => prop_assert!(error.to_string().contains("ttl"), "{}", error),
        }
    }

    /// A number with a unit is read as exactly that long.
    #[test]
    fn a_number_with_a_unit_is_read_exactly(n in 0u64..1_000_000, unit in 0usize..7) {
        let (suffix, length) = [
            ("ns", Duration::from_nanos(n)),
            ("us", Duration::from_micros(n)),
            ("ms", Duration::from_millis(n)),
            ("s", Duration::from_secs(n)),
            ("m", Duration::from_secs(n * 60)),
            ("h", Duration::from_secs(n * 3600)),
            ("d", Duration::from_secs(n * 86_400)),
        ][unit];
        let text = format!("{n}{suffix}");
        prop_assert_eq!(parse_duration("ttl", &text).ok(), Some(length), "{}", text);
    }
}

/// How many of `CASES` values drawn from `strategy` (with a fixed seed,
/// so the figure is the same every run) `accepted` accepts, and how many
/// it refuses.
fn drawn<T: std::fmt::Debug>(
    strategy: impl Strategy<Value = T>,
    accepted: impl Fn(&T) -> bool,
) -> (u32, u32) {
    let mut runner = TestRunner::deterministic();
    let mut counts = (0, 0);
    for _ in 0..CASES {
        let value = strategy.new_tree(&mut runner).unwrap().current();
        if accepted(&value) {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
    }
    counts
}

/// The generators of arbitrary input draw plenty of values that are
/// accepted and plenty that are refused: a generator drawing only one
/// kind would leave half of its property unchecked.
#[test]
fn the_generators_draw_accepted_and_refused_values() {
    let least = CASES / 20;
    let keys = drawn(any_key(), |key| LockKey::new(key).is_ok());
    let namespaces = drawn(any_namespace(), |ns| Namespace::new(ns).is_ok());
    let durations = drawn(any_duration_text(), |text| {
        parse_duration("ttl", text).is_ok()
    });
    for (what, (accepted, refused)) in [
        ("keys", keys),
        ("namespaces", namespaces),
        ("durations", durations),
    ] {
        assert_eq!(accepted + refused, CASES);
        assert!(
            accepted >= least && refused >= least,
            "of {CASES} {what} drawn, {accepted} were accepted and {refused} refused; \
             each should be at least {least}"
        );
    }
    // The values that break a rule must all break one; those that keep
    // the rules must all keep them.
    assert_eq!(
        drawn(key_breaking_a_rule(), |(key, _)| key_allowed(key)),
        (0, CASES)
    );
    assert_eq!(
        drawn(key_keeping_the_rules(), |key| key_allowed(key)),
        (CASES, 0)
    );
    assert_eq!(
        drawn(namespace_breaking_a_rule(), |ns| namespace_allowed(ns)),
        (0, CASES)
    );
}
