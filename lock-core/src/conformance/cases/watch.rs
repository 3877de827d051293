//! Cases about holder values and watches: values stored with the lock,
//! and a watch that reports every change of holder, pushed by the store.

use super::*;
use crate::info::LockInfo;
use crate::limits::MAX_VALUE_LEN;
use crate::token::FencingToken;
use crate::watch::HolderWatch;

/// The next state `watch` reports, failing the case if none comes within
/// `within`.
pub(super) async fn next_state(watch: &mut HolderWatch, within: Duration) -> Option<LockInfo> {
    match tokio::time::timeout(within, watch.changed()).await {
        Ok(state) => state,
        Err(_) => panic!(
            "the watch of `{}` reported nothing for {within:?}",
            watch.key()
        ),
    }
}

/// The next state `watch` reports within [`SLACK`], which must be a
/// holder with `token`; `missing` says what a free lock reported means.
async fn next_holder(watch: &mut HolderWatch, token: FencingToken, missing: &str) -> LockInfo {
    let held = next_state(watch, SLACK).await.expect(missing);
    assert_eq!(held.token, token, "another holder reported");
    held
}

/// A value stored with the lock comes back from `inspect` byte for byte
/// (spaces, newlines, whitespace at either end, non-ASCII, the longest
/// allowed); a longer one is refused before anything is sent, and
/// `set_value` replaces it.
pub async fn holder_values_round_trip(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "values", TTL).await?;
    let mut longest = "é".repeat(MAX_VALUE_LEN / 2 - 1);
    longest.push_str("\n!");
    assert_eq!(longest.len(), MAX_VALUE_LEN);
    for value in [
        "10.0.0.7:8080",
        "two words\nand a line",
        " padded at both ends\t\n",
        "",
        longest.as_str(),
    ] {
        let guard = a.lock_with("k", LockOptions::new().value(value)).await?;
        assert_eq!(guard.value(), value);
        let seen = b.inspect("k").await?.expect("held");
        assert_eq!(seen.value, value, "inspect showed another value");
        assert_eq!(seen.token, guard.token());
        guard.set_value("replaced value").await?;
        assert_eq!(b.inspect("k").await?.expect("held").value, "replaced value");
        assert_eq!(guard.value(), "replaced value");
        guard.release().await?;
    }
    let too_long = "x".repeat(MAX_VALUE_LEN + 1);
    let refused = a
        .lock_with("k", LockOptions::new().value(too_long.as_str()))
        .await;
    assert!(
        matches!(refused, Err(LockError::InvalidValue { .. })),
        "a {}-byte value was not refused: {refused:?}",
        MAX_VALUE_LEN + 1
    );
    assert!(
        b.inspect("k").await?.is_none(),
        "a refused lock call took the lock"
    );
    let guard = a.lock("k").await?;
    assert!(matches!(
        guard.set_value(too_long).await,
        Err(LockError::InvalidValue { .. })
    ));
    assert_eq!(b.inspect("k").await?.expect("held").value, "");
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// A watch starts with the current holder, then reports an acquisition
/// (with its token and value), a value change and a release, in order.
pub async fn watch_reports_acquire_and_release(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "watch_plain", TTL).await?;
    let mut watch = b.watch("k")?;
    assert!(
        next_state(&mut watch, SLACK).await.is_none(),
        "a free lock was reported held"
    );
    let guard = a.lock_with("k", LockOptions::new().value("first")).await?;
    let token = guard.token();
    let held = next_holder(&mut watch, token, "the acquisition was not reported").await;
    assert_eq!(held.value, "first");
    assert_eq!(held.owner, guard.owner().as_str());
    guard.set_value("second").await?;
    let changed = next_holder(&mut watch, token, "the value change was reported as free").await;
    assert_eq!(changed.value, "second");
    guard.release().await?;
    assert!(
        next_state(&mut watch, SLACK).await.is_none(),
        "the release was not reported"
    );
    // A watch started on a held lock starts with its holder.
    let guard = a.lock("k").await?;
    let mut late = b.watch("k")?;
    next_holder(&mut late, guard.token(), "the holder was not reported").await;
    guard.release().await?;
    assert!(next_state(&mut late, SLACK).await.is_none());
    Ok(Outcome::Passed)
}

/// A lease that runs out is reported by the watch as a free lock, within
/// the ttl and a margin, although the store announces nothing.
pub async fn watch_reports_expiry(factory: &dyn LockerFactory) -> CaseResult {
    let Some((settings, a, b)) = two_expiring_lockers(factory, "watch_expiry").await? else {
        return Ok(Outcome::NotApplicable(why::NO_LOCK_EXPIRES_ALONE));
    };
    let mut watch = b.watch("k")?;
    assert!(next_state(&mut watch, SLACK).await.is_none());
    let guard = a.lock("k").await?;
    let token = guard.token();
    guard.leak();
    let leaked_at = Instant::now();
    next_holder(&mut watch, token, "the acquisition was not reported").await;
    assert!(
        next_state(&mut watch, settings.ttl + SLACK).await.is_none(),
        "the expired holder was reported again"
    );
    assert!(
        leaked_at.elapsed() + Duration::from_millis(100) >= settings.ttl,
        "the lock was reported free after {:?}, before its ttl",
        leaked_at.elapsed()
    );
    Ok(Outcome::Passed)
}

/// A lock removed from outside is reported free by the watch.
pub async fn watch_reports_a_lock_taken_away(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "watch_taken", TTL).await?;
    let guard = a.lock("k").await?;
    let mut watch = b.watch("k")?;
    next_holder(&mut watch, guard.token(), "the holder was not reported").await;
    let Some(taken) = factory.take_away(&b, "k").await else {
        return Ok(Outcome::NotApplicable(why::NO_FORCE_RELEASE));
    };
    taken?;
    assert!(
        next_state(&mut watch, SLACK).await.is_none(),
        "the removed lock was reported held"
    );
    drop(guard);
    Ok(Outcome::Passed)
}
