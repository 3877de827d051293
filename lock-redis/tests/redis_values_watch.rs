//! Holder values and watches on real servers, looked at from inside: the
//! bytes a lock key holds with and without a value, what the holder
//! channel carries and that it carries nothing while nobody watches, a
//! value travelling with a waiter's hand-off, and watches on one instance,
//! a cluster and Redlock reporting every change in order, expiry, and
//! resuming after their pub/sub connection was killed.

mod common;

use std::time::Duration;

use common::{connect, holder_of, raw_connection, raw_redis, start};
use distlock_testkit::layout::RedisKeys;
use distlock_testkit::redis::{
    redis_spec, redlock_url, shared_cluster_url, shared_redis_url, shared_redlock_servers,
    TEST_TIMEOUTS,
};
use distlock_testkit::{with_query, Server};
use futures_util::StreamExt;
use lock_core::{HolderWatch, LockError, LockGuard, LockInfo, LockOptions, Locker};

/// How long any one expected change may take to be reported.
const PATIENCE: Duration = Duration::from_secs(10);

/// Values a holder may store: spaces, newlines, the longest allowed,
/// non-ASCII.
fn odd_values() -> Vec<String> {
    vec![
        "10.0.0.7:8080 primary".into(),
        "line one\nline two\n".into(),
        "\n".into(),
        "x".repeat(lock_core::MAX_VALUE_LEN),
        "Grüße — 世界 🦀".into(),
    ]
}

/// A locker on the deployment `url` names, with 2 s leases and keys in
/// `namespace`.
async fn open(url: &str, namespace: &str) -> Locker {
    let query = format!("ttl=2s&namespace={namespace}&{TEST_TIMEOUTS}");
    connect(&with_query(url, &query)).await.unwrap()
}

async fn single(namespace: &str) -> Locker {
    open(&shared_redis_url().await.unwrap(), namespace).await
}

async fn cluster(namespace: &str) -> Locker {
    open(&shared_cluster_url().await.unwrap(), namespace).await
}

async fn redlock(namespace: &str) -> Locker {
    let servers = shared_redlock_servers(3).await.unwrap();
    open(&redlock_url(servers.iter().map(Server::addr)), namespace).await
}

/// The next state `watch` reports, within [`PATIENCE`].
async fn next(watch: &mut HolderWatch) -> Option<LockInfo> {
    tokio::time::timeout(PATIENCE, watch.changed())
        .await
        .expect("no change was reported")
}

/// The owner, token and value `info` describes.
fn state(info: &LockInfo) -> (String, u64, String) {
    (info.owner.clone(), info.token.get(), info.value.clone())
}

/// The state of the lock `guard` holds with `value`.
fn held(guard: &LockGuard, value: impl Into<String>) -> (String, u64, String) {
    (guard.owner().to_string(), guard.token().get(), value.into())
}

/// The bytes key `key` holds, read on `raw`.
async fn get(raw: &mut ::redis::aio::MultiplexedConnection, key: &str) -> String {
    ::redis::cmd("GET").arg(key).query_async(raw).await.unwrap()
}

#[tokio::test]
async fn a_value_is_stored_after_a_newline_and_no_value_changes_nothing() {
    let locker = single("values-raw").await;
    let mut raw = raw_redis().await;
    let lock_key = RedisKeys::of(&locker.name("k").unwrap()).lock;
    let bare = locker.lock("k").await.unwrap();
    let stored = get(&mut raw, &lock_key).await;
    assert_eq!(stored, format!("{} {}", bare.token().get(), bare.owner()));
    bare.release().await.unwrap();
    for value in odd_values() {
        let guard = locker
            .lock_with("k", LockOptions::new().value(value.clone()))
            .await
            .unwrap();
        let stored = get(&mut raw, &lock_key).await;
        assert_eq!(
            stored,
            format!("{} {}\n{value}", guard.token().get(), guard.owner())
        );
        let info = holder_of(&locker, "k", "held").await;
        assert_eq!(state(&info), held(&guard, value));
        guard.release().await.unwrap();
    }
}

/// Takes `k` with each odd value in turn, replaces it with each other one,
/// and reads it back through `locker`; then checks that a lost lock's
/// value cannot be set.
async fn values_round_trip(locker: &Locker) {
    let values = odd_values();
    let guard = locker
        .lock_with("k", LockOptions::new().value(values[0].clone()))
        .await
        .unwrap();
    assert_eq!(holder_of(locker, "k", "held").await.value, values[0]);
    for value in values.iter().skip(1).chain([&String::new(), &values[0]]) {
        guard.set_value(value.clone()).await.unwrap();
        let info = holder_of(locker, "k", "held").await;
        assert_eq!(state(&info), held(&guard, value));
        assert!(
            info.ttl_left.is_some_and(|t| t > Duration::ZERO),
            "the lease was lost"
        );
    }
    // Broken by an operator and taken by another: the old guard's value
    // change is refused and touches nothing.
    assert!(locker.force_release("k").await.unwrap());
    let other = locker
        .lock_with("k", LockOptions::new().value("mine"))
        .await
        .unwrap();
    let refused = guard.set_value("stale").await;
    assert!(
        matches!(refused, Err(LockError::Lost { .. })),
        "{refused:?}"
    );
    let info = holder_of(locker, "k", "held by the other").await;
    assert_eq!(state(&info), held(&other, "mine"));
    other.release().await.unwrap();
}

#[tokio::test]
async fn values_round_trip_on_one_instance() {
    values_round_trip(&single("values").await).await;
}

#[tokio::test]
async fn values_round_trip_on_a_cluster() {
    values_round_trip(&cluster("values").await).await;
}

#[tokio::test]
async fn values_round_trip_on_redlock() {
    values_round_trip(&redlock("values").await).await;
}

#[tokio::test]
async fn a_handed_off_lock_carries_the_waiters_value() {
    let locker = single("values-handoff").await;
    let holder = locker
        .lock_with("k", LockOptions::new().value("first"))
        .await
        .unwrap();
    let mut watch = locker.watch("k").unwrap();
    assert_eq!(next(&mut watch).await.unwrap().value, "first");
    let waiter = {
        let locker = locker.clone();
        let options = LockOptions::new().value("second\nline").wait(PATIENCE);
        tokio::spawn(async move { locker.lock_with("k", options).await })
    };
    let name = locker.name("k").unwrap();
    let raw = raw_redis().await;
    distlock_testkit::eventually(PATIENCE, "the waiter queued", || {
        let (mut raw, name) = (raw.clone(), name.clone());
        async move {
            let line = distlock_testkit::redis::waiters_in_line(&mut raw, &name)
                .await
                .map_err(|e| e.to_string())?;
            match line.len() {
                1 => Ok(()),
                n => Err(format!("{n} in line")),
            }
        }
    })
    .await
    .unwrap();
    holder.release().await.unwrap();
    let next_holder = waiter.await.unwrap().unwrap();
    // Handed over inside the release: never free in between.
    let seen = next(&mut watch).await.unwrap();
    assert_eq!(state(&seen), held(&next_holder, "second\nline"));
    next_holder.release().await.unwrap();
    assert_eq!(next(&mut watch).await, None);
}

#[tokio::test]
async fn the_holder_channel_is_silent_until_watched_then_carries_each_state() {
    let url = shared_redis_url().await.unwrap();
    let locker = single("values-channel").await;
    let channel = format!("{}:holder", RedisKeys::of(&locker.name("k").unwrap()).lock);
    let mut listen = ::redis::Client::open(url.as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    listen.subscribe(&channel).await.unwrap();
    // Nobody watches: nothing is published.
    locker.lock("k").await.unwrap().release().await.unwrap();
    let mut watch = locker.watch("k").unwrap();
    assert_eq!(next(&mut watch).await, None);
    let mut messages = listen.on_message();
    // The first message is the watcher's read.
    assert!(payload(&mut messages).await.starts_with("sync "));
    let guard = locker
        .lock_with("k", LockOptions::new().value("v w"))
        .await
        .unwrap();
    let expected = format!("held 2000 {} {}\nv w", guard.token().get(), guard.owner());
    assert_eq!(payload(&mut messages).await, expected);
    guard.set_value("").await.unwrap();
    let changed = payload(&mut messages).await;
    let (pttl, rest) = changed
        .strip_prefix("held ")
        .unwrap()
        .split_once(' ')
        .unwrap();
    assert!(pttl.parse::<u64>().unwrap() <= 2000);
    assert_eq!(rest, format!("{} {}", guard.token().get(), guard.owner()));
    guard.release().await.unwrap();
    assert_eq!(payload(&mut messages).await, "free");
    assert!(locker.force_release("k").await.is_ok());
}

/// The next message's payload from a raw subscription, within
/// [`PATIENCE`].
async fn payload(
    messages: &mut (impl futures_util::Stream<Item = ::redis::Msg> + Unpin),
) -> String {
    let message = tokio::time::timeout(PATIENCE, messages.next())
        .await
        .unwrap()
        .unwrap();
    message.get_payload::<String>().unwrap()
}

/// Watches `key` through `watcher`, free, until `changer` has taken it
/// with `value` and the watch reported that: the watch and the guard.
async fn watch_then_take(
    watcher: &Locker,
    changer: &Locker,
    key: &str,
    value: &str,
) -> (HolderWatch, LockGuard) {
    let mut watch = watcher.watch(key).unwrap();
    assert_eq!(next(&mut watch).await, None, "{key} starts free");
    let guard = changer
        .lock_with(key, LockOptions::new().value(value))
        .await
        .unwrap();
    assert_eq!(state(&next(&mut watch).await.unwrap()), held(&guard, value));
    (watch, guard)
}

/// Watches `k` through `watcher` while `changer` takes it with a value,
/// changes the value `changes` times, hands it to a waiter with a value,
/// and releases it: the watch reports each state in order.
/// `every_value`: each value change is reported (else the values seen
/// are a subsequence ending with the last).
async fn watch_sees_each_change(watcher: &Locker, changer: &Locker, key: &str, every_value: bool) {
    let (mut watch, first) = watch_then_take(watcher, changer, key, "v0").await;
    let me = (first.owner().to_string(), first.token().get());
    let changes = 20;
    for i in 1..=changes {
        first.set_value(format!("v{i}")).await.unwrap();
    }
    let mut last_seen = 0;
    while last_seen < changes {
        let seen = next(&mut watch).await.unwrap();
        assert_eq!((seen.owner.clone(), seen.token.get()), me.clone());
        let n: u32 = seen.value.strip_prefix('v').unwrap().parse().unwrap();
        let expected = if every_value {
            last_seen + 1
        } else {
            n.max(last_seen + 1)
        };
        assert_eq!(n, expected, "{key}: value v{n} after v{last_seen}");
        last_seen = n;
    }
    let waiter = {
        let changer = changer.clone();
        let key = key.to_owned();
        let options = LockOptions::new().value("next").wait(PATIENCE);
        tokio::spawn(async move { changer.lock_with(&key, options).await })
    };
    first.release().await.unwrap();
    let second = waiter.await.unwrap().unwrap();
    let expected = held(&second, "next");
    loop {
        match next(&mut watch).await {
            None => continue,
            Some(seen) => {
                assert_eq!(state(&seen), expected);
                break;
            }
        }
    }
    assert!(second.token().get() > me.1);
    second.release().await.unwrap();
    assert_eq!(next(&mut watch).await, None);
}

/// A lock whose holder stopped renewing is reported free once it expired.
async fn watch_sees_expiry(locker: &Locker) {
    let (mut watch, guard) = watch_then_take(locker, locker, "expiring", "gone soon").await;
    let leaked_at = std::time::Instant::now();
    guard.leak();
    assert_eq!(next(&mut watch).await, None);
    let took = leaked_at.elapsed();
    assert!(
        took < Duration::from_secs(2) + Duration::from_secs(1),
        "expiry seen after {took:?}"
    );
}

/// `watcher` sees each change `changer` makes to each of `keys` (see
/// [`watch_sees_each_change`]), then a lock expire.
async fn watch_sees_changes_and_expiry(
    watcher: &Locker,
    changer: &Locker,
    keys: &[&str],
    every_value: bool,
) {
    for key in keys {
        watch_sees_each_change(watcher, changer, key, every_value).await;
    }
    watch_sees_expiry(watcher).await;
}

#[tokio::test]
async fn a_watch_on_one_instance_sees_each_change_and_expiry() {
    let (a, b) = (single("watch").await, single("watch").await);
    watch_sees_changes_and_expiry(&a, &b, &["k"], true).await;
}

#[tokio::test]
async fn a_watch_on_a_cluster_sees_each_change_wherever_the_lock_lives() {
    let (a, b) = (cluster("watch").await, cluster("watch").await);
    // Keys on different slots, so on different masters than the node the
    // watch listens on.
    let keys = ["k-1", "k-2", "k-3", "k-4"];
    watch_sees_changes_and_expiry(&a, &b, &keys, true).await;
}

#[tokio::test]
async fn a_watch_on_redlock_sees_each_change_and_expiry() {
    let (a, b) = (redlock("watch").await, redlock("watch").await);
    watch_sees_changes_and_expiry(&a, &b, &["k"], false).await;
}

#[tokio::test]
async fn a_watch_resumes_after_its_pub_sub_connection_is_killed() {
    let server = start(redis_spec("redis-watch-kill")).await;
    let url = format!("redis://{}", server.addr());
    let locker = connect(&with_query(&url, &format!("ttl=2s&{TEST_TIMEOUTS}")))
        .await
        .unwrap();
    let (mut watch, guard) = watch_then_take(&locker, &locker, "k", "before").await;
    let mut raw = raw_connection(&url).await;
    let killed: i64 = ::redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(killed >= 1, "no pub/sub connection to kill");
    // Changed while the watch reconnects and after: it ends up reporting
    // the latest value, in order.
    for value in ["during", "after"] {
        guard.set_value(value).await.unwrap();
    }
    loop {
        let seen = next(&mut watch).await.unwrap();
        assert_eq!(seen.token, guard.token());
        assert_ne!(seen.value, "before", "an old state came back");
        if seen.value == "after" {
            break;
        }
    }
    guard.release().await.unwrap();
    assert_eq!(next(&mut watch).await, None);
}
