//! Read locks and semaphores in ZooKeeper, as the suite cannot see them:
//! their nodes (readers in the lock's queue, permits in a directory of
//! their own that stores the limit) and which sessions watch a holder's
//! permit (only the first waiter: a permit given back wakes one waiter).

mod common;

use std::time::Duration;

use common::{connect, SLACK};
use distlock_testkit::layout::zk_lock_dir;
use distlock_testkit::with_query;
use distlock_testkit::zookeeper::{raw_client, shared_standalone, watchers_of, zk_url};
use lock_core::{HoldKind, LockGuard, Locker};

/// The base path the lockers of these tests use.
const BASE: &str = "/shared";

async fn locker(namespace: &str) -> (Locker, Vec<std::net::SocketAddr>) {
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    let url = with_query(
        &zk_url(&addrs, BASE, ""),
        &format!("namespace={namespace}&ttl=10s"),
    );
    (connect(&url).await.unwrap(), addrs)
}

/// The children of `dir`, sorted by the sequence number they end with.
async fn children(client: &zookeeper_client::Client, dir: &str) -> Vec<String> {
    let mut names = client.list_children(dir).await.unwrap_or_default();
    names.sort_by_key(|name| name.rsplit('-').next().unwrap_or("").to_owned());
    names
}

/// Readers are `read-` nodes in the lock's `_locks` queue, in sequence
/// order with the exclusive `lock-` nodes; permits are `permit-` nodes in
/// a `_permits` sibling whose data is the limit. Releases delete them.
#[tokio::test]
async fn readers_queue_with_writers_and_permits_live_beside_them() {
    let (locker, addrs) = locker("zk-shared-layout").await;
    let raw = raw_client(&addrs).await.unwrap();
    let name = locker.name("cfg").unwrap();
    let locks = zk_lock_dir(BASE, &name);
    let permits = locks.replace("/_locks", "/_permits");

    let rw = locker.rwlock("cfg").unwrap();
    let reader = rw.read().await.unwrap();
    let writer = {
        let rw = locker.rwlock("cfg").unwrap();
        tokio::spawn(async move { rw.write().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let queued = children(&raw, &locks).await;
    assert_eq!(queued.len(), 2, "{queued:?}");
    assert!(queued[0].starts_with("read-"), "{queued:?}");
    assert!(queued[1].starts_with("lock-"), "{queued:?}");
    let listed = rw.holders().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].kind, HoldKind::Shared);
    assert_eq!(listed[0].token, reader.token());

    let pool = locker.semaphore("cfg", 3).unwrap();
    let permit = pool.acquire().await.unwrap();
    let (limit, _) = raw.get_data(&permits).await.unwrap();
    assert_eq!(limit, b"3");
    let held = children(&raw, &permits).await;
    assert_eq!(held.len(), 1);
    assert!(held[0].starts_with("permit-"), "{held:?}");
    assert_eq!(
        pool.holders().await.unwrap()[0].kind,
        HoldKind::Permit { limit: 3 }
    );

    let reader_token = reader.token();
    reader.release().await.unwrap();
    let written = tokio::time::timeout(SLACK, writer).await.unwrap();
    let written = written.unwrap().unwrap();
    assert!(written.token() > reader_token);
    written.release().await.unwrap();
    permit.release().await.unwrap();
    assert!(children(&raw, &locks).await.is_empty());
    assert!(children(&raw, &permits).await.is_empty());
}

/// With both permits of a 2-permit semaphore held and three waiters, no
/// waiter sets a data watch on a holder's node (the first waiter watches
/// the holders with child watches, which fire on deletion only; `wchp`
/// lists data watches): each holder's node has only its own session's.
/// Each waiter's node is watched by its own session and by the waiter just
/// behind it, the last one's by its own only: the waiters behind the first
/// watch only the node ahead of them, so a permit given back wakes one
/// waiter.
#[tokio::test]
async fn waiters_behind_the_first_watch_only_the_node_ahead() {
    const WAITERS: usize = 3;
    let (holder, addrs) = locker("zk-shared-watch").await;
    let raw = raw_client(&addrs).await.unwrap();
    let name = holder.name("pool").unwrap();
    let permits = zk_lock_dir(BASE, &name).replace("/_locks", "/_permits");
    let pool = holder.semaphore("pool", 2).unwrap();
    let held: Vec<LockGuard> = vec![pool.acquire().await.unwrap(), pool.acquire().await.unwrap()];
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        let (other, _) = locker("zk-shared-watch").await;
        let pool = other.semaphore("pool", 2).unwrap();
        waiters.push(tokio::spawn(async move {
            let permit = pool.acquire().await;
            (other, permit)
        }));
        // Queued in this order.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Past the holders' delayed own-node watch.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let queued = children(&raw, &permits).await;
    assert_eq!(queued.len(), 2 + WAITERS, "{queued:?}");
    for (at, node) in queued.iter().enumerate() {
        let expected = if at < 2 || at == queued.len() - 1 {
            1
        } else {
            2
        };
        let watchers = watchers_of(addrs[0], &format!("{permits}/{node}")).await;
        assert_eq!(
            watchers,
            Ok(expected),
            "sessions watching node {at}, {node}"
        );
    }
    for guard in held {
        guard.release().await.unwrap();
    }
    for waiter in waiters {
        let (_other, permit) = tokio::time::timeout(SLACK, waiter).await.unwrap().unwrap();
        permit.unwrap().release().await.unwrap();
    }
}
