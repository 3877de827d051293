//! The conformance suite against ZooKeeper, opened by URL through the
//! `distlock` facade: on a standalone server shared by the cases, and on a
//! 3-server ensemble (one per test binary, started on first use).

use conformance_tests::zookeeper::{shared_standalone, Ensemble, ZkFactory};
use distlock::Capabilities;
use tokio::sync::OnceCell;

async fn zk_factory() -> ZkFactory {
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    ZkFactory::new(addrs, "/suite", "")
}

async fn ensemble_factory() -> ZkFactory {
    static ENSEMBLE: OnceCell<Result<Ensemble, String>> = OnceCell::const_new();
    let ensemble = ENSEMBLE.get_or_init(|| Ensemble::start(3)).await;
    let ensemble = ensemble.as_ref().unwrap_or_else(|e| panic!("{e}"));
    ZkFactory::new(ensemble.client_addrs(), "/suite-ensemble", "")
}

lock_core::conformance_tests!(zookeeper, zk_factory);
lock_core::conformance_tests!(zookeeper_ensemble, ensemble_factory);

/// Locks live as long as their session (no per-lock lease), so the cases
/// needing per-lock expiry report themselves not applicable; everything
/// else is declared. This pins the flags so none flips unnoticed.
#[tokio::test]
async fn zookeeper_declares_its_capabilities() {
    let locker = distlock::connect("zk://127.0.0.1:1/x").await.unwrap();
    let mut expected = Capabilities::default();
    expected.expiry = true;
    expected.force_release = true;
    expected.notified_wakeups = true;
    expected.fifo = true;
    expected.remote = true;
    assert_eq!(locker.capabilities(), expected);
    assert_eq!(locker.backend_name(), "zookeeper");
}

/// Waiters that give up in the middle of the queue: the others are served
/// one at a time, in queue order (see `conformance_tests::queue`).
mod queue_order {
    use conformance_tests::queue::{check_queue, Shape, QUEUE_KEY};
    use conformance_tests::zookeeper::{shared_standalone, zk_url};
    use distlock::lock_zookeeper::names::lock_dir;
    use distlock::Locker;

    const BASE: &str = "/queue";

    async fn check(namespace: &str, shape: Shape) {
        let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
        let url = zk_url(&addrs, BASE, &format!("ttl=10s&namespace={namespace}"));
        let hosts: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        let raw = zookeeper_client::Client::connect(&hosts.join(","))
            .await
            .unwrap();
        let open = || async { distlock::connect(&url).await.unwrap() };
        let queued = |holder: Locker| {
            let raw = raw.clone();
            async move {
                let dir = lock_dir(BASE, &holder.name(QUEUE_KEY).unwrap());
                match raw.list_children(&dir).await {
                    Ok(children) => children,
                    Err(zookeeper_client::Error::NoNode) => Vec::new(),
                    Err(e) => panic!("list {dir}: {e}"),
                }
            }
        };
        check_queue(open, queued, shape).await;
    }

    conformance_tests::queue_order_tests!("zkq", check);
}

/// A lock taken at once watches its own node only after a delay (a short
/// hold then costs the server no watch). A removal from outside is
/// reported all the same: right after the acquisition, before the watch
/// is set, and later, through the watch.
#[tokio::test]
async fn a_lock_removed_from_outside_is_reported_lost_before_and_after_its_watch_is_set() {
    use distlock::LossReason;
    use std::time::Duration;

    let factory = zk_factory().await;
    let url = conformance_tests::with_query(&factory.url(), "namespace=zk-own-watch&ttl=10s");
    let locker = distlock::connect(&url).await.unwrap();
    for held_for in [Duration::ZERO, Duration::from_millis(400)] {
        let guard = locker.lock("k").await.unwrap();
        tokio::time::sleep(held_for).await;
        assert!(
            guard.is_held(),
            "lost after {held_for:?} with nobody touching it"
        );
        factory.delete_holder(&locker, "k").await.unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .unwrap_or_else(|_| panic!("a removal after {held_for:?} was not reported"));
        assert_eq!(reason, LossReason::TakenAway);
        assert!(!guard.is_held());
        assert!(
            matches!(guard.release().await, Err(distlock::LockError::Lost { .. })),
            "a release of a removed lock must report Lost"
        );
        // The lock is free for others, and the locker still works.
        locker.lock("k").await.unwrap().release().await.unwrap();
    }
}
