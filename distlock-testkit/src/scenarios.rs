//! Test scenarios that are the same on every store: each store's tests
//! set up their servers and lockers, then run the scenario, so what is
//! checked is written once.

pub mod lost_reply;

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
