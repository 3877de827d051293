//! Cases about semaphores: never more than `limit` holders, permits of
//! vanished holders coming back, a stored limit, and one waiter let in per
//! permit given back.

use std::collections::HashSet;

use super::*;
use crate::semaphore::Semaphore;

/// The semaphore of `locker` called `name`, or the reason the case does
/// not apply.
fn semaphore(locker: &Locker, name: &str, limit: u32) -> Result<Option<Semaphore>, LockError> {
    if !locker.capabilities().semaphores {
        return Ok(None);
    }
    locker.semaphore(name, limit).map(Some)
}

/// Three permits of a 3-permit semaphore are taken at once on three
/// lockers, and a fourth is refused. Then sixteen tasks on four lockers
/// take permits over and over: never more than three at once (checked
/// in-process), every token distinct.
pub async fn semaphore_never_exceeds_its_limit(factory: &dyn LockerFactory) -> CaseResult {
    const LIMIT: u32 = 3;
    const TASKS: usize = 16;
    const ROUNDS: usize = 4;
    let settings = settings("semaphore_limit", TTL);
    let lockers = open_many(factory, &settings, 4).await?;
    if semaphore(&lockers[0], "pool", LIMIT)?.is_none() {
        return Ok(Outcome::NotApplicable(why::NO_SEMAPHORES));
    }
    let mut all = Vec::new();
    for locker in &lockers[..3] {
        let permit = locker.semaphore("pool", LIMIT)?.try_acquire().await?;
        all.push(permit.expect("a free permit was refused"));
    }
    let fourth = lockers[3].semaphore("pool", LIMIT)?.try_acquire().await?;
    assert!(fourth.is_none(), "a fourth permit of three was given");
    for permit in all {
        permit.release().await?;
    }
    let inside = Arc::new(AtomicU64::new(0));
    let tokens = Arc::new(Mutex::new(HashSet::new()));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let pool = lockers[i % lockers.len()].semaphore("pool", LIMIT)?;
        let (inside, tokens) = (inside.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let permit = pool.acquire_with(wait(Duration::from_secs(60))).await?;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= u64::from(LIMIT), "{now} permit holders of {LIMIT}");
                let fresh = tokens.lock().unwrap().insert(permit.token().get());
                assert!(fresh, "token {} handed out twice", permit.token());
                tokio::time::sleep(Duration::from_millis(10)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    join_all(tasks).await?;
    Ok(Outcome::Passed)
}

/// A permit taken under one limit makes a request under another limit
/// fail, naming both; once the permit is back, the new limit is accepted.
pub async fn semaphore_limit_mismatch_is_an_error(factory: &dyn LockerFactory) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "semaphore_mismatch", TTL).await?;
    let Some(two) = semaphore(&a, "pool", 2)? else {
        return Ok(Outcome::NotApplicable(why::NO_SEMAPHORES));
    };
    if !a.capabilities().stored_limits {
        return Ok(Outcome::NotApplicable(why::NO_STORED_LIMIT));
    }
    let three = b.semaphore("pool", 3)?;
    let permit = two.acquire().await?;
    match three.try_acquire().await {
        Err(LockError::LimitMismatch { stored, asked, .. }) => {
            assert_eq!((stored, asked), (2, 3), "the limits named");
        }
        other => panic!("a request under another limit gave {other:?}"),
    }
    // A waiting request fails at once too, instead of waiting out its
    // wait (the wait is long so that a loaded store answering slowly
    // cannot end it first).
    let waited = three.acquire_with(wait(SLACK)).await;
    assert!(
        matches!(waited, Err(LockError::LimitMismatch { .. })),
        "a waiting request under another limit gave {waited:?}"
    );
    permit.release().await?;
    let taken = three.acquire_with(wait(SLACK)).await?;
    assert_eq!(three.holders().await?.len(), 1);
    taken.release().await?;
    assert!(
        matches!(
            b.semaphore("pool", 0),
            Err(LockError::InvalidLimit { limit: 0 })
        ),
        "a limit of 0 must be refused"
    );
    Ok(Outcome::Passed)
}

/// The permit of a holder that vanished (stopped renewing, or cut off
/// from the store) is given to a waiter after the ttl, and not before.
pub async fn vanished_permit_returns_after_ttl(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("vanished_permit", SHORT_TTL);
    let waiter = factory.open(&settings).await?;
    let Some(pool) = semaphore(&waiter, "pool", 1)? else {
        return Ok(Outcome::NotApplicable(why::NO_SEMAPHORES));
    };
    let Some(vanished) = vanish(factory, &settings, &waiter, |locker| async move {
        locker
            .semaphore("pool", 1)?
            .acquire_with(LockOptions::new().auto_renew(false))
            .await
    })
    .await?
    else {
        return Ok(Outcome::NotApplicable(why::NO_ABANDONED_HOLD));
    };
    let taken = pool.acquire_with(wait(settings.ttl * 2 + SLACK)).await?;
    if let Some(lease_start) = vanished.lease_start {
        assert!(
            lease_start.elapsed() >= settings.ttl - crate::backend::clock_drift(settings.ttl),
            "the vanished holder's permit was given away after {:?}, within its {:?} lease",
            lease_start.elapsed(),
            settings.ttl
        );
    }
    assert!(taken.token() > vanished.token, "tokens went backwards");
    taken.release().await?;
    vanished.end().await;
    Ok(Outcome::Passed)
}

/// A hold whose holder vanished: kept renewing nothing (a leaked guard
/// on a store with per-lock leases) or cut off from the store.
struct Vanished {
    token: crate::token::FencingToken,
    /// Where the hold had a lease of its own: when the call that took it
    /// began, so that the lease ended no sooner than a ttl later. (A
    /// session's lease may have been renewed last before the hold.)
    lease_start: Option<Instant>,
    outage: Option<Box<dyn super::super::factory::Outage>>,
}

impl Vanished {
    /// Restores the vanished holder's connection, if it was cut.
    async fn end(self) {
        if let Some(outage) = self.outage {
            outage.end().await;
        }
    }
}

/// Takes a hold with `take` on a locker that then vanishes: `take`'s guard
/// is leaked where every hold has its own lease, else the locker is cut
/// off from the store through the factory's outage. `None` if neither
/// applies.
async fn vanish<F, Fut>(
    factory: &dyn LockerFactory,
    settings: &CaseSettings,
    probe: &Locker,
    take: F,
) -> Result<Option<Vanished>, LockError>
where
    F: FnOnce(Locker) -> Fut,
    Fut: std::future::Future<Output = Result<LockGuard, LockError>>,
{
    if probe.capabilities().per_lock_expiry {
        let locker = factory.open(settings).await?;
        let lease_start = Instant::now();
        let guard = take(locker).await?;
        let token = guard.token();
        guard.leak();
        return Ok(Some(Vanished {
            token,
            lease_start: Some(lease_start),
            outage: None,
        }));
    }
    let Some(opened) = factory.open_with_outage(settings).await else {
        return Ok(None);
    };
    let (locker, outage) = opened?;
    let guard = take(locker).await?;
    let token = guard.token();
    outage.begin().await;
    guard.leak();
    Ok(Some(Vanished {
        token,
        lease_start: None,
        outage: Some(outage),
    }))
}

/// With every permit held and four waiters queued, giving one permit back
/// lets exactly one waiter in; the others keep waiting.
pub async fn releasing_a_permit_lets_one_waiter_in(factory: &dyn LockerFactory) -> CaseResult {
    const WAITERS: usize = 4;
    let settings = settings("permit_one_waiter", TTL);
    let holder = factory.open(&settings).await?;
    let Some(pool) = semaphore(&holder, "pool", 2)? else {
        return Ok(Outcome::NotApplicable(why::NO_SEMAPHORES));
    };
    let first = pool.acquire().await?;
    let second = pool.acquire().await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for locker in open_many(factory, &settings, WAITERS).await? {
        let (pool, tx) = (locker.semaphore("pool", 2)?, tx.clone());
        waiters.push(tokio::spawn(async move {
            let permit = pool.acquire_with(wait(Duration::from_secs(60))).await?;
            let _ = tx.send(permit.token());
            // Held until the case ends.
            std::future::pending::<()>().await;
            drop(permit);
            Ok::<_, LockError>(())
        }));
    }
    let early = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await;
    assert!(early.is_err(), "a waiter got a permit while all were held");
    first.release().await?;
    let let_in = tokio::time::timeout(SLACK, rx.recv()).await;
    assert!(
        matches!(let_in, Ok(Some(_))),
        "no waiter got the permit given back"
    );
    let more = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
    assert!(
        more.is_err(),
        "two waiters got in for one permit given back"
    );
    assert_eq!(
        pool.holders().await?.len(),
        2,
        "holders after one hand-over"
    );
    for waiter in &waiters {
        waiter.abort();
    }
    second.release().await?;
    Ok(Outcome::Passed)
}
