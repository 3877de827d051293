//! Cases about read-write locks: readers share, writers exclude, a
//! waiting writer is not overtaken, tokens from one counter per name,
//! cancelled requests leave nothing behind, and lost read locks and
//! permits are signalled.

use super::*;
use crate::info::HoldKind;
use crate::rwlock::RwLock;

/// The read-write lock of `locker` called `name`, if the store has them.
fn rwlock(locker: &Locker, name: &str) -> Result<Option<RwLock>, LockError> {
    if !locker.capabilities().shared_locks {
        return Ok(None);
    }
    locker.rwlock(name).map(Some)
}

/// Readers on two lockers hold at once and are listed as holders; a
/// writer and a plain lock of the name cannot get in beside them. Then
/// twelve tasks read and write at random: a writer never overlaps anyone
/// (checked in-process), and readers did overlap.
pub async fn readers_share_and_writers_exclude(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("readers_share", TTL);
    let lockers = open_many(factory, &settings, 4).await?;
    let Some(a) = rwlock(&lockers[0], "cfg")? else {
        return Ok(Outcome::NotApplicable(why::NO_READ_WRITE_LOCKS));
    };
    let b = lockers[1].rwlock("cfg")?;
    let first = a.read().await?;
    let second = b.try_read().await?.expect("a second reader was refused");
    assert_eq!(second.kind(), HoldKind::Shared);
    let mut listed: Vec<_> = a.holders().await?.iter().map(|h| h.token).collect();
    listed.sort();
    assert_eq!(
        listed,
        vec![first.token(), second.token()],
        "the readers listed"
    );
    assert!(
        b.try_write().await?.is_none(),
        "a writer got in beside readers"
    );
    assert!(
        lockers[2].try_lock("cfg").await?.is_none(),
        "a plain lock got in beside readers"
    );
    first.release().await?;
    second.release().await?;

    let readers = Arc::new(AtomicU64::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let most_readers = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..12usize {
        let lock = lockers[i % lockers.len()].rwlock("cfg")?;
        let (readers, writing, most) = (readers.clone(), writing.clone(), most_readers.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..4usize {
                let long = wait(Duration::from_secs(60));
                if (i + round) % 4 == 0 {
                    let guard = lock.write_with(long).await?;
                    assert!(!writing.swap(true, Ordering::SeqCst), "two writers at once");
                    let inside = readers.load(Ordering::SeqCst);
                    assert_eq!(inside, 0, "a writer beside {inside} readers");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    writing.store(false, Ordering::SeqCst);
                    guard.release().await?;
                } else {
                    let guard = lock.read_with(long).await?;
                    assert!(!writing.load(Ordering::SeqCst), "a reader beside a writer");
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await?;
                }
            }
            Ok::<_, LockError>(())
        }));
    }
    join_all(tasks).await?;
    assert!(
        most_readers.load(Ordering::SeqCst) >= 2,
        "readers never overlapped"
    );
    Ok(Outcome::Passed)
}

/// With a reader holding and a writer waiting, a reader that asks after
/// the writer waits too; when the first reader leaves, the writer gets in
/// before it.
pub async fn waiting_writer_is_not_overtaken_by_later_readers(
    factory: &dyn LockerFactory,
) -> CaseResult {
    let settings = settings("writer_not_overtaken", TTL);
    let lockers = open_many(factory, &settings, 3).await?;
    let Some(reader) = rwlock(&lockers[0], "cfg")? else {
        return Ok(Outcome::NotApplicable(why::NO_READ_WRITE_LOCKS));
    };
    let (writer, late) = (lockers[1].rwlock("cfg")?, lockers[2].rwlock("cfg")?);
    let held = reader.read().await?;
    let order = Arc::new(Mutex::new(Vec::new()));
    let writing = {
        let order = order.clone();
        tokio::spawn(async move {
            let guard = writer.write_with(wait(Duration::from_secs(60))).await?;
            order.lock().unwrap().push("writer");
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.release().await
        })
    };
    // Once the writer is waiting, readers that ask must wait behind it; a
    // reader let in before that is given back at once.
    let deadline = Instant::now() + SLACK * 2;
    loop {
        match late.try_read().await? {
            None => break,
            Some(early) => {
                early.release().await?;
                assert!(
                    Instant::now() < deadline,
                    "readers kept getting in while a writer waited"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let reading = {
        let order = order.clone();
        tokio::spawn(async move {
            let guard = late.read_with(wait(Duration::from_secs(60))).await?;
            order.lock().unwrap().push("late reader");
            guard.release().await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        order.lock().unwrap().is_empty(),
        "{:?} got in",
        order.lock().unwrap()
    );
    held.release().await?;
    join(writing).await?;
    join(reading).await?;
    assert_eq!(*order.lock().unwrap(), ["writer", "late reader"]);
    Ok(Outcome::Passed)
}

/// Plain locks, read locks and write locks of one name take their tokens
/// from one counter: each strictly greater than the one before.
pub async fn tokens_increase_across_read_and_write_guards(
    factory: &dyn LockerFactory,
) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "rw_tokens", TTL).await?;
    let Some(rw) = rwlock(&a, "cfg")? else {
        return Ok(Outcome::NotApplicable(why::NO_READ_WRITE_LOCKS));
    };
    let other = b.rwlock("cfg")?;
    let mut tokens = Vec::new();
    let plain = b.lock("cfg").await?;
    tokens.push(plain.token());
    plain.release().await?;
    let (r1, r2) = (rw.read().await?, other.read().await?);
    tokens.extend([r1.token(), r2.token()]);
    r1.release().await?;
    r2.release().await?;
    let w = other.write().await?;
    tokens.push(w.token());
    w.release().await?;
    let r3 = rw.read().await?;
    tokens.push(r3.token());
    r3.release().await?;
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "tokens in the order taken: {tokens:?}"
    );
    Ok(Outcome::Passed)
}

/// Read, write and permit requests dropped or timed out while waiting
/// leave nothing behind: a later request gets in at once.
pub async fn cancelled_shared_requests_leave_nothing_behind(
    factory: &dyn LockerFactory,
) -> CaseResult {
    let (_, a, b) = two_lockers(factory, "cancelled_shared", TTL).await?;
    let caps = a.capabilities();
    if !caps.shared_locks && !caps.semaphores {
        return Ok(Outcome::NotApplicable(why::NO_SHARED_HOLDS));
    }
    let short = Duration::from_millis(200);
    if caps.shared_locks {
        let (rw, other) = (a.rwlock("cfg")?, b.rwlock("cfg")?);
        // A writer that gave up behind a reader must not hold readers back.
        let reading = rw.read().await?;
        assert_timed_out(&other.write_with(wait(short)).await);
        assert_still_waiting(other.write(), short, "a writer behind a reader").await;
        let next = other.try_read().await?;
        assert!(next.is_some(), "a cancelled writer kept a reader out");
        drop(next);
        reading.release().await?;
        // A reader that gave up behind a writer must not hold writers back.
        let writing = rw.write().await?;
        assert_still_waiting(other.read(), short, "a reader behind a writer").await;
        writing.release().await?;
        let next = other.write_with(wait(SLACK)).await?;
        next.release().await?;
    }
    if caps.semaphores {
        let (pool, other) = (a.semaphore("pool", 1)?, b.semaphore("pool", 1)?);
        let permit = pool.acquire().await?;
        assert_timed_out(&other.acquire_with(wait(short)).await);
        assert_still_waiting(other.acquire(), short, "a permit past the limit").await;
        permit.release().await?;
        let next = pool.acquire_with(wait(SLACK)).await?;
        next.release().await?;
    }
    Ok(Outcome::Passed)
}

/// A read lock and a permit (those the store has) whose lease is taken away (it ran out without
/// renewal, or the holder was cut off from the store) report `lost()`
/// within ttl + margin.
pub async fn lost_fires_for_read_locks_and_permits(factory: &dyn LockerFactory) -> CaseResult {
    let settings = settings("shared_lost", SHORT_TTL);
    let probe = factory.open(&settings).await?;
    let caps = probe.capabilities();
    if !caps.shared_locks && !caps.semaphores {
        return Ok(Outcome::NotApplicable(why::NO_SHARED_HOLDS));
    }
    let (holder, outage) = if caps.per_lock_expiry {
        (probe, None)
    } else {
        match factory.open_with_outage(&settings).await {
            Some(opened) => {
                let (locker, outage) = opened?;
                (locker, Some(outage))
            }
            None => return Ok(Outcome::NotApplicable(why::NO_ABANDONED_HOLD)),
        }
    };
    let no_renewal = || LockOptions::new().auto_renew(false);
    let mut guards = Vec::new();
    if caps.shared_locks {
        let read = holder.rwlock("cfg")?.read_with(no_renewal()).await?;
        guards.push(("read lock", read));
    }
    if caps.semaphores {
        let permit = holder
            .semaphore("pool", 2)?
            .acquire_with(no_renewal())
            .await?;
        guards.push(("permit", permit));
    }
    if let Some(outage) = &outage {
        outage.begin().await;
    }
    for (what, guard) in &guards {
        let lost = tokio::time::timeout(settings.ttl + SLACK, guard.lost()).await;
        assert!(lost.is_ok(), "the {what}'s lost() did not fire");
        assert!(!guard.is_held(), "the {what} still claims to be held");
    }
    if let Some(outage) = outage {
        outage.end().await;
    }
    Ok(Outcome::Passed)
}
