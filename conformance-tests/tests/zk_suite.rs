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

/// Where a session last had to wait, its next acquisition lists the queue
/// without a child watch and watches its own node directly: a lock taken
/// there and then deleted from outside is still reported lost.
#[tokio::test]
async fn a_lock_taken_where_the_session_last_waited_reports_its_removal() {
    use std::time::Duration;

    let factory = zk_factory().await;
    let url = conformance_tests::with_query(&factory.url(), "namespace=zk-busy-hint&ttl=10s");
    let first = distlock::connect(&url).await.unwrap();
    let second = distlock::connect(&url).await.unwrap();
    let held = first.lock("k").await.unwrap();
    let waiting = {
        let second = second.clone();
        tokio::spawn(async move { second.lock("k").await })
    };
    // Released only once the second locker is queued behind it.
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    let hosts: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    let raw = zookeeper_client::Client::connect(&hosts.join(","))
        .await
        .unwrap();
    let dir = distlock::lock_zookeeper::names::lock_dir("/suite", &second.name("k").unwrap());
    tokio::time::timeout(Duration::from_secs(10), async {
        while raw.list_children(&dir).await.map_or(0, |c| c.len()) < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the second locker never queued");
    held.release().await.unwrap();
    let handed = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter never got the lock")
        .unwrap()
        .unwrap();
    handed.release().await.unwrap();

    // Uncontended now, but the session remembers having waited here.
    let guard = second.lock("k").await.unwrap();
    factory.delete_holder(&second, "k").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the removal was not reported");
    assert!(!guard.is_held());
}
