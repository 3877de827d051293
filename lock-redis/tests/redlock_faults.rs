//! Redlock with masters down, on five dedicated `redis-server` masters per
//! test: a minority down still locks, a majority down never gives a false
//! success, and fencing tokens keep increasing while masters restart
//! (without persistence) between holders; a failed quorum leaves nothing
//! on the masters that granted it.

mod common;

use std::time::Duration;

use common::{connect, holder_of, raw_connection};
use distlock_testkit::redis::{redlock_url, start_masters, TEST_TIMEOUTS};
use distlock_testkit::Server;
use lock_core::{LockError, LockOptions, Locker};

async fn masters(name: &str) -> Vec<Server> {
    start_masters(name, 5).await.unwrap()
}

async fn locker(servers: &[Server], namespace: &str) -> Locker {
    let url = redlock_url(servers.iter().map(Server::addr));
    connect(&format!(
        "{url}?ttl=2s&namespace={namespace}&{TEST_TIMEOUTS}"
    ))
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_masters_down_still_locks() {
    let servers = masters("redlock-minority").await;
    let locker = locker(&servers, "minority").await;
    servers[0].stop();
    servers[3].stop();
    let guard = locker
        .lock_with("k", LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(
        locker.try_lock("k").await.unwrap().is_none(),
        "a second holder"
    );
    let info = holder_of(&locker, "k", "held by a majority").await;
    assert_eq!(info.owner, guard.owner().as_str());
    assert_eq!(info.token, guard.token());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(guard.is_held(), "renewal on the majority failed");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_masters_down_never_succeeds() {
    let servers = masters("redlock-majority").await;
    let locker = locker(&servers, "majority").await;
    for i in [1, 2, 4] {
        servers[i].stop();
    }
    for _ in 0..3 {
        match locker.try_lock("k").await {
            Err(LockError::Unavailable { .. }) => {}
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
    let waited = locker
        .lock_with("k", LockOptions::new().wait(Duration::from_secs(2)))
        .await;
    assert!(
        matches!(
            waited,
            Err(LockError::Unavailable { .. } | LockError::Timeout { .. })
        ),
        "{waited:?}"
    );
    // Nothing was left behind on the two live masters.
    servers[1].restart().await.unwrap();
    let guard = locker
        .lock_with("k", LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_while_masters_restart_between_holders() {
    let servers = masters("redlock-tokens").await;
    let a = locker(&servers, "tokens").await;
    let b = locker(&servers, "tokens").await;
    let take = |locker: &Locker| {
        let locker = locker.clone();
        async move {
            let guard = locker
                .lock_with("k", LockOptions::new().wait(Duration::from_secs(10)))
                .await
                .unwrap();
            let token = guard.token().get();
            guard.release().await.unwrap();
            token
        }
    };
    // Push the counters apart: masters 0 and 1 are down for a while.
    servers[0].stop();
    servers[1].stop();
    let mut last = 0;
    for _ in 0..5 {
        let token = take(&a).await;
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
    // They come back empty (no persistence); the others go down in turn,
    // so each holder's majority differs from the one before it.
    servers[0].restart().await.unwrap();
    servers[1].restart().await.unwrap();
    for down in [[3, 4], [2, 3], [4, 0], [0, 1]] {
        for i in down {
            servers[i].stop();
        }
        for locker in [&a, &b] {
            let token = take(locker).await;
            assert!(
                token > last,
                "token {token} after {last} with masters {down:?} down"
            );
            last = token;
        }
        for i in down {
            servers[i].restart().await.unwrap();
        }
    }
}

/// An acquisition that reached only a minority undoes what it took: right
/// after the failed attempt, well inside the 30 s ttl, the masters that
/// granted it hold no lock key (else the lock would stay blocked on them
/// for a whole ttl).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_quorum_leaves_nothing_on_the_masters_that_granted() {
    let servers = masters("redlock-undo").await;
    let url = redlock_url(servers.iter().map(Server::addr));
    let locker = connect(&format!("{url}?ttl=30s&namespace=undo&{TEST_TIMEOUTS}"))
        .await
        .unwrap();
    for i in [1, 2, 4] {
        servers[i].stop();
    }
    let attempt = locker.try_lock("k").await;
    assert!(
        matches!(attempt, Err(LockError::Unavailable { .. })),
        "{attempt:?}"
    );
    let keys = distlock_testkit::layout::RedisKeys::of(&locker.name("k").unwrap());
    for i in [0, 3] {
        let mut raw = raw_connection(&format!("redis://{}", servers[i].addr())).await;
        let left: bool = ::redis::cmd("EXISTS")
            .arg(&keys.lock)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(!left, "master {i} still holds the lock key");
        let counter: Option<u64> = ::redis::cmd("GET")
            .arg(&keys.token)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(
            counter.is_some(),
            "master {i} never granted: nothing was undone"
        );
    }
}
