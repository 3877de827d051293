//! The conformance suite against ZooKeeper, opened by URL through the
//! `distlock` facade: on a standalone server shared by the cases, and on a
//! 3-server ensemble (one per test binary, started on first use). A lock
//! is taken away by deleting its holder's node.

#[macro_use]
mod common;

use std::net::SocketAddr;

use conformance_tests::{DeleteZkHolder, StoreFactory};
use distlock_testkit::loopback_hosts;
use distlock_testkit::zookeeper::{shared_standalone, zk_url, Ensemble};
use tokio::sync::OnceCell;

/// Lockers under `base` on the servers at `addrs`.
fn factory(addrs: Vec<SocketAddr>, base: &str) -> StoreFactory {
    let url = zk_url(&addrs, base, "");
    // A server from DISTLOCK_TEST_ZK_URL that is not on loopback cannot be
    // put behind a proxy: the outage case then reports itself not applicable.
    StoreFactory::new(&url)
        .outage_through(loopback_hosts(&url))
        .take_away_with(DeleteZkHolder {
            addrs,
            base: base.to_owned(),
        })
}

async fn zk_factory() -> StoreFactory {
    let addrs = shared_standalone().await.unwrap_or_else(|e| panic!("{e}"));
    factory(addrs, "/suite")
}

async fn ensemble_factory() -> StoreFactory {
    static ENSEMBLE: OnceCell<Result<Ensemble, String>> = OnceCell::const_new();
    let ensemble = ENSEMBLE.get_or_init(|| Ensemble::start(3)).await;
    let ensemble = ensemble.as_ref().unwrap_or_else(|e| panic!("{e}"));
    factory(ensemble.client_addrs(), "/suite-ensemble")
}

conformance_tests_lacking!(zookeeper, zk_factory, [per_lock_expiry]);
conformance_tests_lacking!(zookeeper_ensemble, ensemble_factory, [per_lock_expiry]);
