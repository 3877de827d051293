//! Read locks and semaphores on one real `redis-server` (the tests'
//! shared one), beyond what the conformance suite sees: where they are
//! kept, that a given-back permit is announced to one waiter only, that a
//! writer's release lets in exactly the readers right behind it, and that
//! a vanished reader's entry is swept. Keys are looked at with a raw
//! connection; their names are those the crate's README documents.

mod common;

use std::time::{Duration, Instant};

use common::{connect, raw_redis};
use distlock_testkit::layout::RedisKeys;
use distlock_testkit::redis::{redlock_url, shared_redis_url, shared_redlock_servers};
use distlock_testkit::{assert_not_before, with_query, Server};
use futures_util::StreamExt;
use lock_core::backend::HoldKind;
use lock_core::{LockError, LockGuard, LockOptions, Locker};

/// `n` lockers on the shared server in `namespace` with leases of `ttl`,
/// each with its own connection and grant channel.
async fn lockers(namespace: &str, ttl: &str, n: usize) -> Vec<Locker> {
    let url = with_query(
        &shared_redis_url().await.unwrap(),
        &format!("ttl={ttl}&namespace={namespace}"),
    );
    let mut lockers = Vec::with_capacity(n);
    for _ in 0..n {
        lockers.push(connect(&url).await.unwrap());
    }
    lockers
}

/// The lock key of `key` in `locker`'s namespace, followed by `suffix`.
fn key_of(locker: &Locker, key: &str, suffix: &str) -> String {
    format!("{}{suffix}", RedisKeys::of(&locker.name(key).unwrap()).lock)
}

async fn query<T: ::redis::FromRedisValue>(
    raw: &mut ::redis::aio::MultiplexedConnection,
    cmd: &mut ::redis::Cmd,
) -> T {
    cmd.query_async(raw).await.unwrap()
}

/// The line of `key` in `locker`'s namespace: the list of owners in
/// line and the hash of their places, `kind` naming whose line it is
/// (`""` for the lock's, `"permit"` for a semaphore's).
struct Line {
    list: String,
    hash: String,
}

impl Line {
    /// The line of `key`; see [`Line`].
    fn of(locker: &Locker, key: &str, kind: &str) -> Self {
        Line {
            list: key_of(locker, key, &format!(":{kind}queue")),
            hash: key_of(locker, key, &format!(":{kind}waiters")),
        }
    }
}

/// A permit of semaphore `pool` (limit `limit`) taken by `locker`.
async fn pool_permit(locker: &Locker, limit: u32) -> LockGuard {
    let pool = locker.semaphore("pool", limit).unwrap();
    pool.acquire().await.unwrap()
}

/// Waits until `line` has `n` live places.
async fn until_queued(line: &Line, n: usize) {
    let (list, hash) = (&line.list, &line.hash);
    let mut raw = raw_redis().await;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let line: Vec<String> =
                query(&mut raw, ::redis::cmd("LRANGE").arg(list).arg(0).arg(-1)).await;
            let places: Vec<String> = query(&mut raw, ::redis::cmd("HKEYS").arg(hash)).await;
            if line.iter().filter(|o| places.contains(o)).count() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} waiters never queued in {list}"));
}

/// Read locks live in a sorted set scored by lease end, with their token,
/// owner and value in a hash; permits likewise, with the limit beside
/// them; the lock key itself stays free. Everything is gone once given
/// back, the limit too.
#[tokio::test]
async fn read_locks_and_permits_are_kept_in_sorted_sets() {
    let lockers = lockers("shared-layout", "10s", 1).await;
    let locker = &lockers[0];
    let mut raw = raw_redis().await;
    let rw = locker.rwlock("cfg").unwrap();
    let first = rw.read_with(LockOptions::new().value("r1")).await.unwrap();
    let second = rw.read().await.unwrap();
    let permit = locker
        .semaphore("cfg", 3)
        .unwrap()
        .acquire_with(LockOptions::new().value("p"))
        .await
        .unwrap();

    let (lock, readers, values) = (
        key_of(locker, "cfg", ""),
        key_of(locker, "cfg", ":readers"),
        key_of(locker, "cfg", ":readvalues"),
    );
    let exists: i64 = query(&mut raw, ::redis::cmd("EXISTS").arg(&lock)).await;
    assert_eq!(exists, 0, "read locks leave the lock key free");
    let time: Vec<String> = query(&mut raw, &mut ::redis::cmd("TIME")).await;
    let now_ms = time[0].parse::<u64>().unwrap() * 1000;
    for guard in [&first, &second] {
        let owner = guard.owner().as_str();
        let score: f64 = query(&mut raw, ::redis::cmd("ZSCORE").arg(&readers).arg(owner)).await;
        let left = score as u64 - now_ms;
        assert!(
            (8_000..=11_000).contains(&left),
            "lease end {left} ms ahead"
        );
    }
    let stored: String = query(
        &mut raw,
        ::redis::cmd("HGET")
            .arg(&values)
            .arg(first.owner().as_str()),
    )
    .await;
    assert_eq!(stored, format!("{} {}\nr1", first.token(), first.owner()));

    let permits: Vec<String> = query(
        &mut raw,
        ::redis::cmd("ZRANGE")
            .arg(key_of(locker, "cfg", ":permits"))
            .arg(0)
            .arg(-1),
    )
    .await;
    assert_eq!(permits, [permit.owner().as_str()]);
    let limit: String = query(
        &mut raw,
        ::redis::cmd("GET").arg(key_of(locker, "cfg", ":limit")),
    )
    .await;
    assert_eq!(limit, "3");
    let listed = locker.permit_holders("cfg").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].kind, HoldKind::Permit { limit: 3 });
    assert_eq!(listed[0].value, "p");

    first.release().await.unwrap();
    second.release().await.unwrap();
    permit.release().await.unwrap();
    for suffix in [
        ":readers",
        ":readvalues",
        ":permits",
        ":permitvalues",
        ":limit",
    ] {
        let exists: i64 = query(
            &mut raw,
            ::redis::cmd("EXISTS").arg(key_of(locker, "cfg", suffix)),
        )
        .await;
        assert_eq!(exists, 0, "{suffix} left behind");
    }
}

/// With the one permit held and three waiters in line, giving it back
/// publishes exactly one hand-off, to the first waiter; the others hear
/// nothing.
#[tokio::test]
async fn a_released_permit_is_announced_to_one_waiter_only() {
    let lockers = lockers("shared-one-grant", "10s", 4).await;
    let line = Line::of(&lockers[0], "pool", "permit");
    let held = pool_permit(&lockers[0], 1).await;
    let mut tasks = Vec::new();
    for (i, locker) in lockers[1..].iter().enumerate() {
        let pool = locker.semaphore("pool", 1).unwrap();
        tasks.push(tokio::spawn(async move {
            pool.acquire_with(LockOptions::new().wait(Duration::from_secs(30)))
                .await
        }));
        until_queued(&line, i + 1).await;
    }
    let mut raw = raw_redis().await;
    let owners: Vec<String> = query(
        &mut raw,
        ::redis::cmd("LRANGE").arg(&line.list).arg(0).arg(-1),
    )
    .await;

    let client = ::redis::Client::open(shared_redis_url().await.unwrap().as_str()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.psubscribe("distlock:grants:*").await.unwrap();
    let mut messages = pubsub.into_on_message();
    held.release().await.unwrap();

    let mut ours = Vec::new();
    let until = Instant::now() + Duration::from_millis(500);
    while let Ok(Some(message)) = tokio::time::timeout_at(until.into(), messages.next()).await {
        let payload: String = message.get_payload().unwrap();
        // Other tests share the server: count only hand-offs to our line.
        if owners
            .iter()
            .any(|owner| payload.ends_with(&format!(" {owner}")))
        {
            ours.push(payload);
        }
    }
    assert_eq!(ours.len(), 1, "hand-offs for one permit: {ours:?}");
    assert!(
        ours[0].ends_with(&owners[0]),
        "not the first in line: {ours:?}"
    );
    let done: Vec<bool> = tasks.iter().map(|t| t.is_finished()).collect();
    assert_eq!(done.iter().filter(|d| **d).count(), 1, "{done:?}");
    for task in tasks {
        task.abort();
    }
}

/// A writer holds; in line are two readers, a writer and a reader. The
/// release lets in the two readers only; the second writer gets in when
/// they leave, and the last reader after it.
#[tokio::test]
async fn a_writer_release_lets_in_the_readers_right_behind_it() {
    let lockers = lockers("shared-batch", "10s", 5).await;
    let line = Line::of(&lockers[0], "cfg", "");
    let writer = lockers[0].rwlock("cfg").unwrap().write().await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(&str, LockGuard)>();
    let long = || LockOptions::new().wait(Duration::from_secs(30));
    for (i, (what, write)) in [("r1", false), ("r2", false), ("w2", true), ("r3", false)]
        .into_iter()
        .enumerate()
    {
        let (rw, tx) = (lockers[i + 1].rwlock("cfg").unwrap(), tx.clone());
        tokio::spawn(async move {
            let guard = if write {
                rw.write_with(long()).await
            } else {
                rw.read_with(long()).await
            };
            let _ = tx.send((what, guard?));
            Ok::<_, LockError>(())
        });
        until_queued(&line, i + 1).await;
    }
    let quiet = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<(&'static str, LockGuard)>| {
        rx.try_recv().map(|(what, _)| what).err()
    };
    writer.release().await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (what, guard) = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .unwrap();
        readers.push(what);
        // Both readers hold for a while, then leave.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            guard.release().await
        });
    }
    readers.sort();
    assert_eq!(readers, ["r1", "r2"]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        quiet(&mut rx).is_some(),
        "w2 or r3 got in beside the readers"
    );
    let holders = lockers[0].holders("cfg").await.unwrap();
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|h| h.kind == HoldKind::Shared));
    let (what, w2) = tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(what, "w2");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(quiet(&mut rx).is_some(), "r3 got in beside the writer");
    w2.release().await.unwrap();
    let (what, r3) = tokio::time::timeout(Duration::from_secs(2), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(what, "r3");
    r3.release().await.unwrap();
}

/// A reader that vanished (stopped renewing) holds writers back for its
/// lease only; its entry is swept when the writer gets in.
#[tokio::test]
async fn a_vanished_reader_is_swept_after_its_lease() {
    let lockers = lockers("shared-vanished", "1s", 2).await;
    let taken = Instant::now();
    let reader = lockers[0]
        .rwlock("cfg")
        .unwrap()
        .read_with(LockOptions::new().auto_renew(false))
        .await
        .unwrap();
    reader.leak();
    let rw = lockers[1].rwlock("cfg").unwrap();
    assert!(rw.try_write().await.unwrap().is_none(), "beside a reader");
    let writer = rw
        .write_with(LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_not_before(
        taken,
        Duration::from_millis(900),
        "the writer in, the vanished reader's lease alive",
    );
    let mut raw = raw_redis().await;
    for suffix in [":readers", ":readvalues"] {
        let left: i64 = query(
            &mut raw,
            ::redis::cmd("EXISTS").arg(key_of(&lockers[1], "cfg", suffix)),
        )
        .await;
        assert_eq!(left, 0, "{suffix} kept the vanished reader");
    }
    writer.release().await.unwrap();
}

/// A semaphore's limit lives as long as its live permits, renewals
/// included (else a request under another limit would be let in beside
/// them), and expires with the lease of a permit whose holder vanished.
#[tokio::test]
async fn the_limit_lives_as_long_as_the_permits() {
    let lockers = lockers("shared-limit", "1s", 2).await;
    let held = pool_permit(&lockers[0], 2).await;
    // Three leases long: the permit lives on by renewals alone.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(held.is_held());
    let other = lockers[1].semaphore("pool", 3).unwrap().try_acquire().await;
    assert!(
        matches!(
            other,
            Err(LockError::LimitMismatch {
                stored: 2,
                asked: 3,
                ..
            })
        ),
        "{other:?}"
    );
    held.leak();
    let mut raw = raw_redis().await;
    let limit = key_of(&lockers[0], "pool", ":limit");
    let pttl: i64 = query(&mut raw, ::redis::cmd("PTTL").arg(&limit)).await;
    assert!(
        (1..=1_000).contains(&pttl),
        "the limit expires in {pttl} ms"
    );
}

/// Redlock keeps no line and no holder count across its masters: read
/// locks and semaphores are not offered there.
#[tokio::test]
async fn redlock_has_no_read_locks_or_semaphores() {
    let servers = shared_redlock_servers(3).await.unwrap();
    let locker = connect(&redlock_url(servers.iter().map(Server::addr)))
        .await
        .unwrap();
    let caps = locker.capabilities();
    assert!(!caps.shared_locks && !caps.semaphores);
    assert!(matches!(
        locker.rwlock("cfg"),
        Err(LockError::NotSupported { .. })
    ));
    assert!(matches!(
        locker.semaphore("pool", 2),
        Err(LockError::NotSupported { .. })
    ));
}
