//! Cases about the life of calls and guards: cancelled calls, dropped
//! guards, an unreachable store, and `inspect`.

use super::*;

/// Dropping an in-flight `lock()` — while queued behind a holder, or in the
/// middle of taking a free lock — leaves nothing that blocks the next
/// acquirer: the key is free at once (long before any ttl).
pub async fn dropped_lock_call_leaves_nothing_behind(factory: &dyn LockerFactory) -> CaseResult {
    let (settings, a, b) = two_lockers(factory, "dropped_lock_call", TTL).await?;
    let c = factory.open(&settings).await?;
    // Waiters dropped while queued behind a holder.
    let holder = a.lock("queued").await?;
    for _ in 0..3 {
        let returned = "lock() on a held key returned";
        assert_still_waiting(b.lock("queued"), Duration::from_millis(200), returned).await;
    }
    let timed_out = b
        .lock_with("queued", wait(Duration::from_millis(200)))
        .await;
    assert_timed_out(&timed_out);
    holder.release().await?;
    let next = c.lock_with("queued", wait(Duration::from_secs(1))).await?;
    next.release().await?;
    // Calls dropped at varying points while taking a free lock.
    for step in 0..12u64 {
        let cut_after = Duration::from_micros(step * step * 150);
        if let Ok(taken) = tokio::time::timeout(cut_after, b.lock("free")).await {
            drop(taken?);
        }
        let next = c
            .lock_with("free", wait(Duration::from_secs(1)))
            .await
            .unwrap_or_else(|e| panic!("key blocked after a call dropped at {cut_after:?}: {e}"));
        next.release().await?;
    }
    Ok(Outcome::Passed)
}

/// Dropping a guard releases the lock in the background, soon.
pub async fn dropped_guard_frees_lock_shortly(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "dropped_guard", TTL).await?;
    drop(a.lock("k").await?);
    let guard = b.lock_with("k", wait(Duration::from_secs(1))).await?;
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// With the store unreachable, calls fail with `Unavailable` instead of
/// hanging or panicking; once it is back, the same locker works again.
pub async fn unreachable_store_gives_unavailable_then_recovers(
    factory: &dyn LockerFactory,
) -> CaseResult {
    const NO_HANG: Duration = Duration::from_secs(20);
    let settings = settings("unreachable", TTL);
    let Some(opened) = factory.open_with_outage(&settings).await else {
        return Ok(Outcome::NotApplicable(why::NO_OUTAGE));
    };
    let (locker, outage) = opened?;
    locker.lock("before").await?.release().await?;
    outage.begin().await;
    let during = tokio::time::timeout(NO_HANG, locker.try_lock("during")).await;
    let during = during.expect("try_lock hung while the store was unreachable");
    assert!(
        matches!(during, Err(LockError::Unavailable { .. })),
        "expected Unavailable, got {during:?}"
    );
    let waited = tokio::time::timeout(
        NO_HANG,
        locker.lock_with("during", wait(Duration::from_secs(2))),
    )
    .await;
    assert!(
        matches!(
            waited.expect("lock hung"),
            Err(LockError::Unavailable { .. } | LockError::Timeout { .. })
        ),
        "lock during an outage must fail"
    );
    outage.end().await;
    let deadline = Instant::now() + NO_HANG;
    loop {
        match locker.try_lock("after").await {
            Ok(Some(guard)) => {
                guard.release().await?;
                return Ok(Outcome::Passed);
            }
            Ok(None) => panic!("key `after` is held by nobody, yet try_lock failed"),
            Err(error) if Instant::now() < deadline && error.is_retriable() => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("the locker did not recover: {error}"),
        }
    }
}

/// Dropping a guard while the store is unreachable neither blocks nor
/// panics, and the lock is free once the store is back: at once if the
/// background release gets through, after the ttl at the latest.
pub async fn guard_dropped_while_unreachable_frees_the_lock_once_back(
    factory: &dyn LockerFactory,
) -> CaseResult {
    let settings = settings("dropped_unreachable", TTL);
    let Some(opened) = factory.open_with_outage(&settings).await else {
        return Ok(Outcome::NotApplicable(why::NO_OUTAGE));
    };
    let (locker, outage) = opened?;
    let other = factory.open(&settings).await?;
    let guard = locker.lock("k").await?;
    outage.begin().await;
    let started = Instant::now();
    drop(guard);
    let dropping = started.elapsed();
    assert!(
        dropping < Duration::from_millis(50),
        "dropping a guard blocked for {dropping:?} with the store unreachable"
    );
    assert!(
        other.try_lock("k").await?.is_none(),
        "the lock was free while its holder's store was unreachable"
    );
    outage.end().await;
    let bound = TTL + Duration::from_secs(5);
    let taken = other.lock_with("k", wait(bound)).await;
    let guard = taken.unwrap_or_else(|e| panic!("the lock stayed taken after the outage: {e}"));
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// `inspect` reports the holder's owner and token, and `None` for a free key.
pub async fn inspect_reports_holder(factory: &dyn LockerFactory) -> CaseResult {
    let (settings, a, b) = two_lockers(factory, "inspect", TTL).await?;
    assert!(b.inspect("k").await?.is_none(), "a free key has a holder");
    let guard = a.lock("k").await?;
    let info = b.inspect("k").await?.expect("held key shows no holder");
    assert_eq!(info.owner, guard.owner().as_str());
    assert_eq!(info.token, guard.token());
    if let Some(left) = info.ttl_left {
        assert!(left <= settings.ttl, "ttl_left {left:?} above the ttl");
    }
    guard.release().await?;
    assert!(
        b.inspect("k").await?.is_none(),
        "a released key still has a holder"
    );
    Ok(Outcome::Passed)
}
