//! Redlock with masters down, on five dedicated `redis-server` masters per
//! test: a minority down still locks, a majority down never gives a false
//! success and leaves nothing on the masters that answered, and fencing
//! tokens keep increasing while masters restart (without persistence)
//! between holders; a failed quorum leaves nothing on the masters that
//! granted it; a holder process frozen past its validity is replaced by a
//! holder with a higher token, its late fenced write is refused, and it is
//! told it lost.
//!
//! A "holder process" is this test binary run again with
//! [`HOLDER_URL_VAR`] set: the `redlock_holder_process_helper` test then
//! takes the lock and reports on stdout what it does.

mod common;

use std::time::Duration;

use common::helper::{helper_locker, Helper};
use common::{connect, holder_of, raw_connection};
use distlock_testkit::layout::RedisKeys;
use distlock_testkit::redis::{redlock_url, start_masters, TEST_TIMEOUTS};
use distlock_testkit::{eventually, pause_group, resume_group, FencedResource, Server, StaleToken};
use lock_core::{LockError, LockOptions, Locker};

const HOLDER_URL_VAR: &str = "DISTLOCK_TEST_REDLOCK_HOLDER_URL";

async fn masters(name: &str) -> Vec<Server> {
    start_masters(name, 5).await.unwrap()
}

/// The URL of `servers` as Redlock masters, with leases of `ttl` and keys
/// in `namespace`.
fn url(servers: &[Server], namespace: &str, ttl: Duration) -> String {
    let url = redlock_url(servers.iter().map(Server::addr));
    format!(
        "{url}?ttl={}ms&namespace={namespace}&{TEST_TIMEOUTS}",
        ttl.as_millis()
    )
}

async fn locker(servers: &[Server], namespace: &str) -> Locker {
    locker_with_ttl(servers, namespace, Duration::from_secs(2)).await
}

async fn locker_with_ttl(servers: &[Server], namespace: &str, ttl: Duration) -> Locker {
    connect(&url(servers, namespace, ttl)).await.unwrap()
}

/// What master `server` keeps of lock `key` of `locker`'s namespace, read
/// with a raw connection: whether its lock key exists, and its fencing
/// counter (`None` if it never granted a lock of the namespace).
async fn kept_on(server: &Server, locker: &Locker, key: &str) -> (bool, Option<u64>) {
    let keys = RedisKeys::of(&locker.name(key).unwrap());
    let mut raw = raw_connection(&format!("redis://{}", server.addr())).await;
    let lock: bool = ::redis::cmd("EXISTS")
        .arg(&keys.lock)
        .query_async(&mut raw)
        .await
        .unwrap();
    let counter: Option<u64> = ::redis::cmd("GET")
        .arg(&keys.token)
        .query_async(&mut raw)
        .await
        .unwrap();
    (lock, counter)
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

/// Three of five masters down: no attempt succeeds, and the attempts
/// leave nothing on the two live masters. The lease is a minute long, so
/// a lock key left behind would still be there when the masters are read,
/// right after the attempts, and would keep the lock from being taken
/// once a third master is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_masters_down_never_succeeds() {
    const TTL: Duration = Duration::from_secs(60);
    let servers = masters("redlock-majority").await;
    let locker = locker_with_ttl(&servers, "majority", TTL).await;
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
    // Nothing was left behind on the two live masters, read on each of
    // them. A round the wait's deadline cut short is undone in the
    // background: a few seconds at most, far inside the ttl.
    let undone = Duration::from_secs(5);
    for i in [0, 3] {
        let server = &servers[i];
        let counter = eventually(undone, "no lock key on the master", || async {
            match kept_on(server, &locker, "k").await {
                (false, counter) => Ok(counter),
                (true, _) => Err(format!("master {i} still holds the lock key")),
            }
        })
        .await
        .unwrap();
        assert!(
            counter.is_some(),
            "master {i} never granted: nothing was undone"
        );
    }
    // With a third master back, the lock is free at once (a leftover
    // would keep it taken for a minute): only the restarted master's
    // connection may still need a retry.
    servers[1].restart().await.unwrap();
    let guard = eventually(
        Duration::from_secs(10),
        "the lock taken with three masters up",
        || async {
            match locker.try_lock("k").await {
                Ok(Some(guard)) => Ok(guard),
                Ok(None) => panic!("the lock is held: something was left behind"),
                Err(e @ LockError::Unavailable { .. }) => Err(e.to_string()),
                Err(e) => panic!("unexpected error: {e}"),
            }
        },
    )
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
    let locker = locker_with_ttl(&servers, "undo", Duration::from_secs(30)).await;
    for i in [1, 2, 4] {
        servers[i].stop();
    }
    let attempt = locker.try_lock("k").await;
    assert!(
        matches!(attempt, Err(LockError::Unavailable { .. })),
        "{attempt:?}"
    );
    for i in [0, 3] {
        let (left, counter) = kept_on(&servers[i], &locker, "k").await;
        assert!(!left, "master {i} still holds the lock key");
        assert!(
            counter.is_some(),
            "master {i} never granted: nothing was undone"
        );
    }
}

// ------------------------------------------------------------ holder processes

/// Not a test: run by [`frozen_holder_is_fenced_off_and_told_it_lost`] in
/// a child process. Takes lock `k` and says `HELD <token>`; makes a
/// fenced write, `WRITE <token>`; checks that it holds the lock (`CHECKED
/// <held>`) and, before its next write, stalls until a line comes on its
/// stdin (the parent freezes it meanwhile); then writes with its token
/// without checking again, `WRITE <token>`, as a holder that checked
/// before a pause does; then reports the loss it is told of, `LOST
/// <reason>` (or `LOST never`), and what releasing says, `RELEASE <what>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper run as a separate holder process by the fault tests"]
async fn redlock_holder_process_helper() {
    let Some(locker) = helper_locker(HOLDER_URL_VAR).await else {
        return;
    };
    let guard = locker.lock("k").await.unwrap();
    println!("HELD {}", guard.token());
    println!("WRITE {}", guard.token());
    println!("CHECKED {}", guard.is_held());
    tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()))
        .await
        .unwrap()
        .unwrap();
    println!("WRITE {}", guard.token());
    match tokio::time::timeout(Duration::from_secs(10), guard.lost()).await {
        Ok(reason) => println!("LOST {reason:?}"),
        Err(_) => println!("LOST never"),
    }
    match guard.release().await {
        Err(LockError::Lost { .. }) => println!("RELEASE lost"),
        other => println!("RELEASE {other:?}"),
    }
}

/// A Redlock holder process frozen (SIGSTOP) right after it checked its
/// lock, for longer than its lease: another locker takes the lock with a
/// higher token and writes with it. Resumed, the holder makes the write
/// it had checked for with the token it holds: the fencing register
/// refuses that write (the one the holder reports, with its token), and
/// the holder is told it lost the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_is_fenced_off_and_told_it_lost() {
    const TTL: Duration = Duration::from_secs(2);
    let servers = masters("redlock-frozen").await;
    let resource = FencedResource::new();
    let url = url(&servers, "frozen", TTL);
    let mut holder = Helper::start(
        "the holder",
        "redlock_holder_process_helper",
        HOLDER_URL_VAR,
        url,
    )
    .await;
    let held: u64 = holder
        .expect("HELD", Duration::from_secs(20))
        .await
        .parse()
        .unwrap();
    let first: u64 = holder
        .expect("WRITE", Duration::from_secs(5))
        .await
        .parse()
        .unwrap();
    assert_eq!(first, held, "the holder wrote with another token");
    resource.write(first, "from the first holder").unwrap();
    let checked = holder.expect("CHECKED", Duration::from_secs(5)).await;
    assert_eq!(checked, "true", "the holder did not hold its lock");

    pause_group(holder.pid()).await.unwrap();
    let other = locker_with_ttl(&servers, "frozen", TTL).await;
    let guard = other
        .lock_with("k", LockOptions::new().wait(TTL * 5))
        .await
        .unwrap();
    let next = guard.token().get();
    assert!(next > held, "token {next} after the frozen holder's {held}");
    resource.write(next, "from the second holder").unwrap();
    resume_group(holder.pid()).unwrap();
    holder.send("go");

    // The write the resumed holder makes, with the token it reports.
    let late: u64 = holder
        .expect("WRITE", Duration::from_secs(5))
        .await
        .parse()
        .unwrap();
    assert_eq!(
        resource.write(late, "from the frozen holder"),
        Err(StaleToken {
            presented: late,
            highest: next
        }),
        "the resumed holder's write with token {late} was not refused"
    );
    assert_eq!(late, held, "the resumed holder wrote with another token");
    let lost = holder.expect("LOST", Duration::from_secs(15)).await;
    assert!(
        lost == "ValidityExpired" || lost == "RenewalRefused",
        "the resumed holder was told {lost:?}"
    );
    let released = holder.expect("RELEASE", Duration::from_secs(10)).await;
    assert_eq!(released, "lost", "releasing the lost lock said {released}");
    assert_eq!(resource.rejected(), 1);
    assert_eq!(
        resource.last_write(),
        Some((next, "from the second holder".to_owned()))
    );
    assert!(guard.is_held());
    guard.release().await.unwrap();
}
