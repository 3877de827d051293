//! The cases. Each takes a [`LockerFactory`] and checks one behaviour the
//! user relies on; assertion failures panic with what went wrong.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::factory::{CaseSettings, LockerFactory};
use super::runner::Outcome;
use super::CaseResult;
use crate::error::LockError;
use crate::key::{Namespace, MAX_KEY_LEN};
use crate::locker::Locker;
use crate::options::LockOptions;

/// The ttl of most cases: long enough that expiry cannot explain a
/// hand-off the case expects from a release.
const TTL: Duration = Duration::from_secs(3);
/// The ttl of cases that wait for expiry or renewal.
const SHORT_TTL: Duration = Duration::from_secs(1);
/// Slack for scheduling and store latency on a busy CI machine.
const SLACK: Duration = Duration::from_secs(2);

fn settings(case: &str, ttl: Duration) -> CaseSettings {
    let short: String = case
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(24)
        .collect();
    let unique = &uuid::Uuid::new_v4().simple().to_string()[..12];
    CaseSettings {
        namespace: Namespace::new(&format!("c-{short}-{unique}")).expect("valid namespace"),
        ttl,
    }
}

fn wait(d: Duration) -> LockOptions {
    LockOptions::new().wait(d)
}

/// Awaits a spawned task, re-raising its panic in the case.
async fn join<T>(task: tokio::task::JoinHandle<T>) -> T {
    match task.await {
        Ok(value) => value,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => panic!("task failed: {error}"),
    }
}

/// Lockers in the same namespace, each with its own connection.
async fn open_many(
    factory: &dyn LockerFactory,
    settings: &CaseSettings,
    count: usize,
) -> Result<Vec<Locker>, LockError> {
    let mut lockers = Vec::with_capacity(count);
    for _ in 0..count {
        lockers.push(factory.open(settings).await?);
    }
    Ok(lockers)
}

async fn open_two(
    factory: &dyn LockerFactory,
    settings: &CaseSettings,
) -> Result<(Locker, Locker), LockError> {
    Ok((factory.open(settings).await?, factory.open(settings).await?))
}

/// Tasks on several lockers take one key many times: never two holders at
/// once (checked in-process), tokens strictly increasing, no update lost.
pub async fn mutual_exclusion(factory: &dyn LockerFactory) -> CaseResult {
    const LOCKERS: usize = 4;
    const TASKS_PER_LOCKER: usize = 2;
    const ROUNDS: u64 = 12;
    let settings = settings("mutual_exclusion", TTL);
    let inside = Arc::new(AtomicBool::new(false));
    let last_token = Arc::new(Mutex::new(0u64));
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for locker in open_many(factory, &settings, LOCKERS).await? {
        for _ in 0..TASKS_PER_LOCKER {
            let (locker, inside, last_token, counter) = (
                locker.clone(),
                inside.clone(),
                last_token.clone(),
                counter.clone(),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = locker
                        .lock_with("contended", wait(Duration::from_secs(60)))
                        .await?;
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    {
                        let mut last = last_token.lock().unwrap();
                        assert!(
                            guard.token().get() > *last,
                            "token {} after {}",
                            guard.token(),
                            *last
                        );
                        *last = guard.token().get();
                    }
                    // A read-modify-write that loses updates without exclusion.
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await?;
                }
                Ok::<_, LockError>(())
            }));
        }
    }
    for task in tasks {
        join(task).await?;
    }
    let expected = (LOCKERS * TASKS_PER_LOCKER) as u64 * ROUNDS;
    assert_eq!(counter.load(Ordering::SeqCst), expected, "lost updates");
    Ok(Outcome::Passed)
}

/// `try_lock` on a held key returns `None` without waiting, also from the
/// holder's own locker.
pub async fn try_lock_on_held_key_returns_none_at_once(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("try_lock_held", TTL);
    let (a, b) = open_two(factory, &settings).await?;
    let guard = a.lock("k").await?;
    let started = Instant::now();
    assert!(
        b.try_lock("k").await?.is_none(),
        "try_lock took a held lock"
    );
    assert!(
        a.try_lock("k").await?.is_none(),
        "try_lock took a held lock from its own locker"
    );
    assert!(
        started.elapsed() < SLACK,
        "try_lock waited {:?}",
        started.elapsed()
    );
    guard.release().await?;
    let taken = b.try_lock("k").await?;
    assert!(taken.is_some(), "try_lock failed on a free key");
    taken.unwrap().release().await?;
    Ok(Outcome::Passed)
}

/// A wait on a held lock ends with `Timeout` after the wait, not before and
/// not much later.
pub async fn wait_timeout_is_honoured(factory: &dyn LockerFactory) -> CaseResult {
    const WAIT: Duration = Duration::from_millis(600);
    let settings = settings("wait_timeout", TTL);
    let (a, b) = open_two(factory, &settings).await?;
    let guard = a.lock("k").await?;
    let started = Instant::now();
    let outcome = b.lock_with("k", wait(WAIT)).await;
    let elapsed = started.elapsed();
    match outcome {
        Err(LockError::Timeout { waited, .. }) => assert!(waited >= WAIT, "reported {waited:?}"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(elapsed >= WAIT, "gave up early, after {elapsed:?}");
    assert!(elapsed < WAIT + SLACK, "gave up late, after {elapsed:?}");
    assert!(guard.is_held());
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// A waiter gets the lock soon after the release, far sooner than the ttl
/// (a wake-up, not expiry).
pub async fn release_wakes_a_waiter_promptly(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("release_wakes", TTL);
    let (a, b) = open_two(factory, &settings).await?;
    let guard = a.lock("k").await?;
    let waiter = tokio::spawn(async move {
        let guard = b.lock_with("k", wait(Duration::from_secs(30))).await?;
        let acquired_at = Instant::now();
        guard.release().await?;
        Ok::<_, LockError>(acquired_at)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter did not wait");
    guard.release().await?;
    let released_at = Instant::now();
    let acquired_at = join(waiter).await?;
    let handoff = acquired_at.saturating_duration_since(released_at);
    assert!(
        handoff < Duration::from_millis(500),
        "hand-off took {handoff:?}"
    );
    Ok(Outcome::Passed)
}

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
) -> Result<Option<(crate::LockGuard, crate::LockGuard)>, LockError> {
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
    let settings = settings("release_after_takeover", SHORT_TTL);
    let (a, b) = open_two(factory, &settings).await?;
    let ways = [Takeover::Expiry, Takeover::TakeAway];
    let Some((old, new)) = take_over(factory, &a, &b, "k", &ways).await? else {
        return Ok(Outcome::NotApplicable(
            "per_lock_expiry, or a factory that can take locks away",
        ));
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
    assert!(new.is_held());
    new.release().await?;
    Ok(Outcome::Passed)
}

/// Automatic renewal keeps a lock held for more than three ttls.
pub async fn renewal_keeps_lock_past_three_ttls(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("renewal", SHORT_TTL);
    let (a, b) = open_two(factory, &settings).await?;
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
    let settings = settings("abandoned", SHORT_TTL);
    let (a, b) = open_two(factory, &settings).await?;
    if !a.capabilities().per_lock_expiry {
        return Ok(Outcome::NotApplicable("per_lock_expiry"));
    }
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
    let settings = settings("lost_signal", TTL);
    let (a, b) = open_two(factory, &settings).await?;
    let guard = a.lock("k").await?;
    let Some(taken) = factory.take_away(&b, "k").await else {
        return Ok(Outcome::NotApplicable(
            "force_release, or a factory that can take locks away",
        ));
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
    let settings = settings("tokens_holders", TTL);
    let (a, b) = open_two(factory, &settings).await?;
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
    let settings = settings("tokens_expiry", SHORT_TTL);
    let (a, b) = open_two(factory, &settings).await?;
    // Removing a lock from outside may also remove its counter (a deleted
    // lock file), so only store-side take-overs count here.
    let ways = [Takeover::Expiry, Takeover::ForceRelease];
    let Some((old, new)) = take_over(factory, &a, &b, "k", &ways).await? else {
        return Ok(Outcome::NotApplicable("per_lock_expiry or force_release"));
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

/// Different keys are different locks, including keys that share a prefix
/// or a hierarchy level.
pub async fn independent_keys_do_not_block(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("independent_keys", TTL);
    let (a, b) = open_two(factory, &settings).await?;
    let mut held = vec![a.lock("k1").await?];
    for (locker, key) in [
        (&b, "k2"),
        (&a, "k3"),
        (&b, "k1/sub"),
        (&a, "k"),
        (&b, "k1x"),
    ] {
        let guard = tokio::time::timeout(SLACK, locker.try_lock(key))
            .await
            .expect("try_lock hung")?;
        held.push(guard.unwrap_or_else(|| panic!("key {key} was blocked by another key")));
    }
    for guard in held {
        guard.release().await?;
    }
    Ok(Outcome::Passed)
}

/// The same key in two namespaces is two locks.
pub async fn namespaces_isolate(factory: &dyn LockerFactory) -> CaseResult {
    let first = settings("namespaces_a", TTL);
    let second = settings("namespaces_b", TTL);
    let a = factory.open(&first).await?;
    let b = factory.open(&second).await?;
    let in_a = a.lock("shared").await?;
    let in_b = b
        .try_lock("shared")
        .await?
        .expect("blocked by another namespace");
    let seen_from_b = b.inspect("shared").await?.expect("held");
    assert_eq!(seen_from_b.owner, in_b.owner().as_str());
    in_b.release().await?;
    assert!(
        b.inspect("shared").await?.is_none(),
        "namespace b sees a's lock"
    );
    assert!(a.inspect("shared").await?.is_some());
    in_a.release().await?;
    Ok(Outcome::Passed)
}

/// Keys with `/`, spaces, unicode, dots, percent signs and the maximum
/// length work, and stay distinct from each other (held all at once).
pub async fn unusual_keys_work(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("unusual_keys", TTL);
    let (a, b) = open_two(factory, &settings).await?;
    let long_ascii = "x".repeat(MAX_KEY_LEN);
    let long_unicode = "é".repeat(MAX_KEY_LEN / 2);
    let keys = [
        "with/slash/levels",
        "with",
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

/// Dropping an in-flight `lock()` — while queued behind a holder, or in the
/// middle of taking a free lock — leaves nothing that blocks the next
/// acquirer: the key is free at once (long before any ttl).
pub async fn dropped_lock_call_leaves_nothing_behind(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("dropped_lock_call", TTL);
    let (a, b) = open_two(factory, &settings).await?;
    let c = factory.open(&settings).await?;
    // Waiters dropped while queued behind a holder.
    let holder = a.lock("queued").await?;
    for _ in 0..3 {
        let dropped = tokio::time::timeout(Duration::from_millis(200), b.lock("queued")).await;
        assert!(dropped.is_err(), "lock() on a held key returned");
    }
    let timed_out = b
        .lock_with("queued", wait(Duration::from_millis(200)))
        .await;
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
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
    let settings = settings("dropped_guard", TTL);
    let (a, b) = open_two(factory, &settings).await?;
    drop(a.lock("k").await?);
    let guard = b.lock_with("k", wait(Duration::from_secs(1))).await?;
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// A locker does not get a key it already holds.
pub async fn locks_are_not_reentrant(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("not_reentrant", TTL);
    let locker = factory.open(&settings).await?;
    let guard = locker.lock("k").await?;
    assert!(locker.try_lock("k").await?.is_none());
    let again = locker
        .lock_with("k", wait(Duration::from_millis(200)))
        .await;
    assert!(matches!(again, Err(LockError::Timeout { .. })), "{again:?}");
    assert!(guard.is_held());
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
        return Ok(Outcome::NotApplicable(
            "an outage-capable factory (fault proxy)",
        ));
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

/// `inspect` reports the holder's owner and token, and `None` for a free key.
pub async fn inspect_reports_holder(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("inspect", TTL);
    let (a, b) = open_two(factory, &settings).await?;
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

/// A zero wait makes exactly one attempt: success on a free key, an
/// immediate `Timeout` on a held one.
pub async fn zero_wait_makes_one_attempt(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("zero_wait", TTL);
    let (a, b) = open_two(factory, &settings).await?;
    let guard = a.lock_with("k", wait(Duration::ZERO)).await?;
    let started = Instant::now();
    let outcome = b.lock_with("k", wait(Duration::ZERO)).await;
    assert!(
        matches!(outcome, Err(LockError::Timeout { .. })),
        "{outcome:?}"
    );
    assert!(started.elapsed() < SLACK);
    guard.release().await?;
    Ok(Outcome::Passed)
}

/// A lease that is not renewed is reported lost *before* the store frees
/// it: the old holder hears of the loss before a waiting client holds the
/// lock.
pub async fn loss_is_signalled_before_others_can_acquire(
    factory: &dyn LockerFactory,
) -> CaseResult {
    let settings = settings("loss_before_expiry", SHORT_TTL);
    let (a, b) = open_two(factory, &settings).await?;
    if !a.capabilities().per_lock_expiry {
        return Ok(Outcome::NotApplicable("per_lock_expiry"));
    }
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
