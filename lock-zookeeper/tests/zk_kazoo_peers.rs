//! distlock with `layout=curator` and kazoo's `Lock` (Python, Debian's
//! python3-kazoo) on one ZooKeeper path. kazoo names its nodes
//! `<uuid>__lock__<seq>` and, told `extra_lock_patterns=["-lock-"]`, also
//! waits behind Curator's (and so distlock's) `-lock-` nodes; distlock
//! counts kazoo's `__lock__` nodes as mutex contenders. Both must then
//! exclude each other, checked with a fencing register fed the holds' own
//! tokens (the nodes' czxids).

mod common;

use common::mixed::{mixed_run, Fleet, Peers, ROUNDS, TTL};
use common::SLACK;
use distlock_testkit::curator::{Kind, Take};
use lock_core::LockOptions;
use tokio::time::timeout;

/// kazoo peers and distlock lockers increment one counter under one lock,
/// [`ROUNDS`] times each: the total is exact, no two holds overlap, and
/// the fencing register accepted every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_counter_is_exact_across_kazoo_and_distlock() {
    let fleet = Fleet::new("kazoo-counter", Peers::Kazoo).await;
    let ledger = mixed_run(&fleet, "counter", |_, _| Kind::Mutex).await;
    ledger.assert_safe();
    assert_eq!(*ledger.counter.lock().unwrap(), 4 * ROUNDS as u64);
    assert_eq!(ledger.register.writes().accepted(), 8 * ROUNDS as u64);
}

/// Each side waits for the other's holder, and takes over with a higher
/// token once it releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_distlock_wait_for_each_other() {
    let fleet = Fleet::new("kazoo-order", Peers::Kazoo).await;
    let path = fleet.path("k");
    let mut kazoo = fleet.peer().await;
    let locker = fleet.locker().await;

    let first = kazoo.take(&Take::Mutex(path.clone())).await.unwrap();
    assert!(
        first.node.contains("__lock__"),
        "kazoo's node {}",
        first.node
    );
    let waiting = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .lock_with("k", LockOptions::new().wait(TTL * 5))
                .await
        })
    };
    fleet.wait_for_nodes(&path, "-lock-", 1).await;
    assert!(
        locker.try_lock("k").await.unwrap().is_none(),
        "distlock took a lock kazoo holds"
    );
    assert!(
        !waiting.is_finished(),
        "distlock's waiter got in beside kazoo"
    );
    kazoo.release().await.unwrap();
    let guard = timeout(SLACK, waiting)
        .await
        .expect("distlock never got in");
    let guard = guard.unwrap().unwrap();
    assert!(guard.token().get() > first.czxid);

    kazoo.begin(&Take::Mutex(path.clone())).await.unwrap();
    fleet.wait_for_nodes(&path, "__lock__", 1).await;
    let early = timeout(std::time::Duration::from_millis(300), kazoo.held()).await;
    assert!(early.is_err(), "kazoo took a lock distlock holds");
    let token = guard.token().get();
    guard.release().await.unwrap();
    let second = timeout(SLACK, kazoo.held())
        .await
        .expect("kazoo never got in");
    assert!(second.unwrap().czxid > token);
    kazoo.release().await.unwrap();
}
