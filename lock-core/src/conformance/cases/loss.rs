//! Cases about leases: renewal, expiry, locks taken away, the lost
//! signal and fencing tokens across holders.

use super::*;

/// How a case makes a holder's lock stop being its own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takeover {
    /// Let the lease run out (needs per-lock expiry).
    Expiry,
    /// Remove it in the store, keeping the store's token counter
    /// ([`Locker::force_release`]).
    ForceRelease,
    /// Remove it from outside by the factory's means
    /// ([`LockerFactory::take_away`]).
    TakeAway,
}

/// Makes `holder`'s lock on `key` stop being its own, by the first of
/// `ways` the backend supports, and lets `other` take it. Returns the old
/// and the new guard, or `None` if no way applies.
async fn take_over(
    factory: &dyn LockerFactory,
    holder: &Locker,
    other: &Locker,
    key: &str,
    ways: &[Takeover],
) -> Result<Option<(LockGuard, LockGuard)>, LockError> {
    let caps = holder.capabilities();
    for way in ways {
        match way {
            Takeover::Expiry if caps.per_lock_expiry => {
                let old = holder
                    .lock_with(key, LockOptions::new().auto_renew(false))
                    .await?;
                let new = other
                    .lock_with(key, wait(holder.options().ttl + SLACK))
                    .await?;
                return Ok(Some((old, new)));
            }
            Takeover::ForceRelease if caps.force_release => {
                let old = holder.lock(key).await?;
                assert!(
                    other.force_release(key).await?,
                    "force_release found no lock"
                );
                let new = other.lock_with(key, wait(SLACK)).await?;
                return Ok(Some((old, new)));
            }
            Takeover::TakeAway => {
                let old = holder.lock(key).await?;
                let Some(taken) = factory.take_away(other, key).await else {
                    drop(old);
                    continue;
                };
                taken?;
                let new = other.lock_with(key, wait(SLACK)).await?;
                return Ok(Some((old, new)));
            }
            _ => {}
        }
    }
    Ok(None)
}

/// Releasing a lock that expired (or was removed) and was taken by another
/// owner reports `Lost` and leaves the new owner's lock alone.
pub async fn release_after_takeover_reports_lost(factory: &dyn LockerFactory) -> CaseResult {
    let (settings, a, b) = two_lockers(factory, "release_after_takeover", SHORT_TTL).await?;
    let ways = [Takeover::Expiry, Takeover::TakeAway];
    let Some((old, new)) = take_over(factory, &a, &b, "k", &ways).await? else {
        return Ok(Outcome::NotApplicable(why::NO_TAKEOVER));
    };
    // Stores that notice a removal only at the next check get until then.
    let _ = tokio::time::timeout(settings.ttl + SLACK, old.lost()).await;
    assert!(!old.is_held(), "the old guard still claims the lock");
    let outcome = old.release().await;
    assert!(
        matches!(outcome, Err(LockError::Lost { .. })),
        "expected Lost, got {outcome:?}"
    );
    let info = b.inspect("k").await?.expect("the new owner's lock is gone");
    assert_eq!(info.owner, new.owner().as_str());
    passes_if_still_held(new).await
}

/// Automatic renewal keeps a lock held for more than three ttls.
pub async fn renewal_keeps_lock_past_three_ttls(factory: &dyn LockerFactory) -> CaseResult {
    let (settings, a, b) = two_lockers(factory, "renewal", SHORT_TTL).await?;
    let guard = a.lock("k").await?;
    let until = Instant::now() + settings.ttl * 3 + settings.ttl / 2;
    while Instant::now() < until {
        tokio::time::sleep(settings.ttl / 2).await;
        assert!(
            guard.is_held(),
            "lost: {:?}",
            guard.loss_signal().loss_reason()
        );
        assert!(
            b.try_lock("k").await?.is_none(),
            "another locker took a renewed lock"
        );
    }
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// A holder that stops renewing (as if it crashed) frees the lock after
/// the ttl, not before and not much later.
pub async fn abandoned_lock_is_freed_after_ttl(factory: &dyn LockerFactory) -> CaseResult {
    let Some((settings, a, b)) = two_expiring_lockers(factory, "abandoned").await? else {
        return Ok(Outcome::NotApplicable(why::NO_LOCK_EXPIRES_ALONE));
    };
    let before_lock = Instant::now();
    a.lock("k").await?.leak();
    let leaked_at = Instant::now();
    let guard = b.lock_with("k", wait(settings.ttl + SLACK)).await?;
    let freed_after = before_lock.elapsed();
    assert!(
        freed_after + Duration::from_millis(100) >= settings.ttl,
        "freed after {freed_after:?}, before the ttl"
    );
    assert!(leaked_at.elapsed() < settings.ttl + SLACK);
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// When the lock is taken away, the guard's lost signal fires and
/// `is_held` turns false; `extend` and `release` report `Lost`.
pub async fn lost_signal_fires_when_lock_is_taken_away(factory: &dyn LockerFactory) -> CaseResult {
    let (settings, a, b) = two_lockers(factory, "lost_signal", TTL).await?;
    let guard = a.lock("k").await?;
    let Some(taken) = factory.take_away(&b, "k").await else {
        return Ok(Outcome::NotApplicable(why::NO_FORCE_RELEASE));
    };
    taken?;
    let reason = tokio::time::timeout(settings.ttl + SLACK, guard.lost())
        .await
        .expect("the lost signal did not fire");
    assert!(!guard.is_held());
    assert_eq!(guard.loss_signal().loss_reason(), Some(reason));
    assert!(matches!(guard.extend().await, Err(LockError::Lost { .. })));
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
    Ok(Outcome::Passed)
}

/// Tokens strictly increase from one holder to the next.
pub async fn tokens_increase_across_holders(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "tokens_holders", TTL).await?;
    let mut last = 0;
    for locker in [&a, &b, &a, &b, &b] {
        let guard = locker.lock("k").await?;
        assert!(
            guard.token().get() > last,
            "token {} after {last}",
            guard.token()
        );
        last = guard.token().get();
        guard.release().await?;
    }
    let guard = a.try_lock("k").await?.expect("free");
    assert!(guard.token().get() > last);
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// A holder whose lease ended (or whose lock was removed) has a lower
/// token than the next holder.
pub async fn tokens_increase_across_expiry(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "tokens_expiry", SHORT_TTL).await?;
    // Removing a lock from outside may also remove its counter (a deleted
    // lock file), so only store-side take-overs count here.
    let ways = [Takeover::Expiry, Takeover::ForceRelease];
    let Some((old, new)) = take_over(factory, &a, &b, "k", &ways).await? else {
        return Ok(Outcome::NotApplicable(why::NO_TAKEOVER));
    };
    assert!(
        new.token() > old.token(),
        "token {} after {}",
        new.token(),
        old.token()
    );
    drop(old);
    new.release().await?;
    Ok(Outcome::Passed)
}

/// A lease that is not renewed is reported lost *before* the store frees
/// it: the old holder hears of the loss before a waiting client holds the
/// lock.
pub async fn loss_is_signalled_before_others_can_acquire(
    factory: &dyn LockerFactory,
) -> CaseResult {
    let Some((settings, a, b)) = two_expiring_lockers(factory, "loss_before_expiry").await? else {
        return Ok(Outcome::NotApplicable(why::NO_LOCK_EXPIRES_ALONE));
    };
    let old = a
        .lock_with("k", LockOptions::new().auto_renew(false))
        .await?;
    let waiter = tokio::spawn(async move {
        let guard = b.lock_with("k", wait(SHORT_TTL + SLACK)).await?;
        let acquired_at = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(acquired_at)
    });
    tokio::time::timeout(settings.ttl + SLACK, old.lost())
        .await
        .expect("the lost signal did not fire");
    let lost_at = Instant::now();
    let acquired_at = join(waiter).await?;
    assert!(
        lost_at < acquired_at,
        "another client held the lock before the loss was signalled"
    );
    assert!(matches!(old.release().await, Err(LockError::Lost { .. })));
    Ok(Outcome::Passed)
}
