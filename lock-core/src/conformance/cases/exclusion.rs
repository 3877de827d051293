//! Cases about who holds a lock: exclusion, waiting, timeouts and
//! wake-ups, independence of keys and namespaces.

use super::*;

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
                    assert_rises(&last_token, guard.token().get(), "token");
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
    join_all(tasks).await?;
    let expected = (LOCKERS * TASKS_PER_LOCKER) as u64 * ROUNDS;
    assert_eq!(counter.load(Ordering::SeqCst), expected, "lost updates");
    Ok(Outcome::Passed)
}

/// `try_lock` on a held key returns `None` without waiting, also from the
/// holder's own locker.
pub async fn try_lock_on_held_key_returns_none_at_once(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "try_lock_held", TTL).await?;
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
    let (_, a, b) = two_lockers(factory, "wait_timeout", TTL).await?;
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
    passes_if_still_held(guard).await
}

/// A waiter gets the lock soon after the release, far sooner than the ttl
/// (a wake-up, not expiry).
pub async fn release_wakes_a_waiter_promptly(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "release_wakes", TTL).await?;
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

/// Different keys are different locks, including keys that share a prefix
/// or a hierarchy level.
pub async fn independent_keys_do_not_block(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "independent_keys", TTL).await?;
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
    if !a.capabilities().namespaced_keys {
        return Ok(Outcome::NotApplicable(why::NO_NAMESPACES));
    }
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

/// Purging a namespace frees every lock in it at once (their holders
/// learn they lost them) and leaves the same key in another namespace
/// alone.
pub async fn purging_a_namespace_spares_others(factory: &dyn LockerFactory) -> CaseResult {
    let (_, purger, newcomer) = two_lockers(factory, "purge_a", TTL).await?;
    let bystander = factory.open(&settings("purge_b", TTL)).await?;
    let purged = purger.lock("k").await?;
    let spared = bystander.lock("k").await?;
    match purger.purge_namespace().await {
        Err(LockError::NotSupported { .. }) => return Ok(Outcome::NotApplicable(why::NO_PURGE)),
        other => other?,
    }
    let taken = newcomer
        .lock_with("k", wait(Duration::ZERO))
        .await
        .expect("the purged namespace still holds the lock");
    tokio::time::timeout(TTL + SLACK, purged.lost())
        .await
        .expect("the holder in the purged namespace was never told it lost its lock");
    assert!(!purged.is_held());
    let seen = bystander
        .inspect("k")
        .await?
        .expect("the other namespace lost its lock");
    assert_eq!(seen.owner, spared.owner().as_str());
    taken.release().await?;
    passes_if_still_held(spared).await
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
    passes_if_still_held(guard).await
}

/// A zero wait makes exactly one attempt: success on a free key, an
/// immediate `Timeout` on a held one.
pub async fn zero_wait_makes_one_attempt(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "zero_wait", TTL).await?;
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
