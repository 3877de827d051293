//! An operator's force release removes the holds there were when it was
//! called, and nothing else: a client that sends the script again after a
//! lost reply (the cluster client re-sends a command whose reply timed
//! out) must not remove the holder the first run handed the lock to.

mod common;

use std::time::Duration;

use distlock_testkit::layout::RedisKeys;
use distlock_testkit::redis::waiters_in_line;
use lock_core::LockOptions;

/// lock-redis's force release as the server runs it: its helpers, then
/// the release script.
const SCRIPT: &str = concat!(
    include_str!("../src/scripts/common.lua"),
    "\n",
    include_str!("../src/scripts/release_queued.lua")
);

/// Runs the force release script on `name`'s keys for holds up to `upto`.
async fn force_up_to(
    raw: &mut ::redis::aio::MultiplexedConnection,
    name: &lock_core::LockName,
    upto: u64,
) -> i64 {
    let keys = RedisKeys::of(name);
    let suffixed = |suffix: &str| format!("{}:{suffix}", keys.lock);
    ::redis::Script::new(SCRIPT)
        .key(&keys.lock)
        .key(&keys.token)
        .key(suffixed("watched"))
        .key(&keys.queue)
        .key(&keys.waiters)
        .key(suffixed("readers"))
        .key(suffixed("readvalues"))
        .arg(upto)
        .arg("force")
        .invoke_async(raw)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_force_release_sent_twice_spares_the_holder_it_handed_the_lock_to() {
    let url = distlock_testkit::redis::shared_redis_url().await.unwrap();
    let namespace = format!("force-twice-{}", std::process::id());
    let url = common::server_url(
        url.trim_start_matches("redis://"),
        &namespace,
        Duration::from_secs(3),
    );
    let (holder, waiter) = (
        common::connect(&url).await.unwrap(),
        common::connect(&url).await.unwrap(),
    );
    let held = holder.lock("k").await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock_with("k", LockOptions::new().wait(Duration::from_secs(10)))
            .await
            .unwrap();
        (waiter, guard)
    });
    let mut raw = common::raw_redis().await;
    let name = holder.name("k").unwrap();
    // The waiter is in line before the override runs.
    distlock_testkit::wait::eventually(Duration::from_secs(5), "the waiter in line", || {
        let (mut raw, name) = (raw.clone(), name.clone());
        async move { waiters_in_line(&mut raw, &name).await.unwrap().len() == 1 }
    })
    .await
    .unwrap();

    assert_eq!(force_up_to(&mut raw, &name, held.token().get()).await, 1);
    let (waiter, guard) = waiting.await.unwrap();
    assert!(guard.token() > held.token());
    // The same call again, as a client re-sending it would make it.
    assert_eq!(force_up_to(&mut raw, &name, held.token().get()).await, 0);
    let seen = waiter
        .inspect("k")
        .await
        .unwrap()
        .expect("the new holder's lock was removed");
    assert_eq!(seen.owner, guard.owner().as_str());
    assert!(guard.is_held());
    guard.release().await.unwrap();
}
