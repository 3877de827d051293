//! Test scenarios that are the same on every store: each store's tests
//! set up their servers and lockers, then run the scenario, so what is
//! checked is written once.

pub mod lost_reply;
pub mod rw_faults;

use std::time::Duration;

use lock_core::{LockOptions, Locker};

/// The hand-off every store must make, whatever carries it (pub/sub,
/// watches, TLS): `a` takes `key`, `b` sees `a` as its holder, waits for
/// it and gets it once `a` releases, with a higher token. Panics naming
/// the step that failed.
pub async fn hand_over(a: &Locker, b: &Locker, key: &str) {
    let guard = a.lock(key).await.expect("a takes the lock");
    let holder = b
        .inspect(key)
        .await
        .expect("b reads the lock")
        .expect("b sees a's lock");
    assert_eq!(holder.owner, guard.owner().as_str(), "b sees a as holder");
    let (released, taken) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            guard.release().await
        },
        b.lock_with(key, LockOptions::new().wait(Duration::from_secs(10))),
    );
    released.expect("a releases");
    let taken = taken.expect("b gets the lock a released");
    assert!(
        taken.token() > holder.token,
        "b's token {} is not above a's {}",
        taken.token(),
        holder.token
    );
    taken.release().await.expect("b releases");
}

/// The bounds, from the kill, within which [`freed_after_kill`] must see
/// the lock freed.
#[derive(Clone, Copy, Debug)]
pub struct FreedWithin {
    /// The least time the holder's last lease (or session) still runs
    /// after the kill: the lock must not be free sooner.
    pub not_before: Duration,
    /// How long the other locker waits for the lock at most.
    pub wait: Duration,
}

/// A killed holder's lock is freed by expiry, neither at once nor never:
/// `kill` kills the process holding `key` with token `held`, then `other`
/// waits for `key` and gets it within `bounds.wait` of the kill, no sooner
/// than `bounds.not_before`, with a token above `held`. Returns how long
/// after the kill it came. Panics naming the step that failed.
pub async fn freed_after_kill(
    kill: impl FnOnce(),
    other: &Locker,
    (key, held): (&str, u64),
    bounds: FreedWithin,
) -> Duration {
    kill();
    let killed_at = std::time::Instant::now();
    let guard = other
        .lock_with(key, LockOptions::new().wait(bounds.wait))
        .await
        .expect("the other locker takes the killed holder's lock");
    let freed_after = killed_at.elapsed();
    assert!(
        freed_after >= bounds.not_before,
        "free {freed_after:?} after the kill, before the holder's lease ran out"
    );
    let token = guard.token().get();
    assert!(
        token > held,
        "token {token} after the killed holder's {held}"
    );
    guard.release().await.expect("the other locker releases");
    freed_after
}
