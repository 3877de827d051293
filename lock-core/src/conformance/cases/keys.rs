//! Cases about key rules: unusual keys that must work, invalid ones
//! that must be refused.

use super::*;

/// Keys with `/`, spaces, unicode, dots, percent signs and the maximum
/// length work, and stay distinct from each other (held all at once).
pub async fn unusual_keys_work(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "unusual_keys", TTL).await?;
    let long_ascii = "x".repeat(MAX_KEY_LEN);
    let long_unicode = "é".repeat(MAX_KEY_LEN / 2);
    // A name before the names nested under it: in a layout shared with
    // etcd's Go clients (etcd `layout=concurrency`) a name's prefix holds
    // the keys of its nested names, so a held `with/slash/levels` blocks
    // `with`, by design; a held `with` blocks nothing nested under it.
    let keys = [
        "with",
        "with/slash/levels",
        "with space",
        "ünïcødé/鍵 🔒",
        "a/../b",
        "b",
        ".",
        "..",
        "a/./b",
        "a%2Fb",
        "a/b",
        "Key",
        "key",
        "tab\\t and \"quotes\" {braces}:colon*star?",
        long_ascii.as_str(),
        long_unicode.as_str(),
    ];
    let mut held = Vec::new();
    for key in keys {
        let guard = a.try_lock(key).await?;
        let guard = guard.unwrap_or_else(|| panic!("key {key:?} is blocked by another key"));
        assert_eq!(guard.key(), key);
        let info = b
            .inspect(key)
            .await?
            .unwrap_or_else(|| panic!("inspect misses {key:?}"));
        assert_eq!(info.owner, guard.owner().as_str(), "key {key:?}");
        assert!(b.try_lock(key).await?.is_none(), "key {key:?} taken twice");
        held.push(guard);
    }
    for guard in held {
        guard.release().await?;
    }
    Ok(Outcome::Passed)
}

/// Empty, too long, control-character and empty-level keys give
/// `InvalidKey` from every call, at once.
pub async fn invalid_keys_are_rejected(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("invalid_keys", TTL);
    let locker = factory.open(&settings).await?;
    let too_long = "k".repeat(MAX_KEY_LEN + 1);
    for key in [
        "",
        too_long.as_str(),
        "a\0b",
        "a\nb",
        "bell\u{7}",
        "/a",
        "a/",
        "a//b",
    ] {
        let is_invalid = |r: &Result<_, LockError>| matches!(r, Err(LockError::InvalidKey { .. }));
        let checks = async {
            assert!(
                is_invalid(&locker.lock(key).await.map(drop)),
                "lock({key:?})"
            );
            assert!(
                is_invalid(&locker.try_lock(key).await.map(drop)),
                "try_lock({key:?})"
            );
            assert!(
                is_invalid(&locker.inspect(key).await.map(drop)),
                "inspect({key:?})"
            );
        };
        tokio::time::timeout(SLACK, checks)
            .await
            .expect("an invalid key hung");
    }
    Ok(Outcome::Passed)
}
