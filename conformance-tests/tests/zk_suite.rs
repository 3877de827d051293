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
