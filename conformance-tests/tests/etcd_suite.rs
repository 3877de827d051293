//! The conformance suite against etcd, opened by URL through the `distlock`
//! facade: on one shared single member (`etcd::…`) and on one shared
//! 3-member cluster (`etcd_cluster::…`), both spawned by the testkit. A
//! lock is taken away by deleting its holder's queue entry.

#[macro_use]
mod common;

use std::net::SocketAddr;

use conformance_tests::{DeleteEtcdHolder, StoreFactory};
use distlock_testkit::etcd::{etcd_url, shared_cluster, shared_etcd_url, TEST_TIMEOUTS};
use distlock_testkit::{env_override, loopback_hosts, with_query, ETCD_URL_VAR};

/// Lockers on `url`, with outages through proxies to `members`.
fn factory(url: String, members: Vec<SocketAddr>) -> StoreFactory {
    StoreFactory::new(with_query(&url, TEST_TIMEOUTS))
        .outage_through(members)
        .take_away_with(DeleteEtcdHolder { url })
}

async fn etcd_factory() -> StoreFactory {
    let url = shared_etcd_url().await.expect("etcd test server");
    // A server from DISTLOCK_TEST_ETCD_URL cannot be put behind a proxy we
    // know the target of; the outage case then reports itself not applicable.
    let members = match env_override(ETCD_URL_VAR) {
        Some(_) => Vec::new(),
        None => loopback_hosts(&url),
    };
    factory(url, members)
}

async fn etcd_cluster_factory() -> StoreFactory {
    let members: Vec<_> = shared_cluster()
        .await
        .expect("etcd test cluster")
        .iter()
        .map(|server| server.addr())
        .collect();
    factory(etcd_url(members.clone()), members)
}

conformance_tests_lacking!(etcd, etcd_factory, [per_lock_expiry]);
conformance_tests_lacking!(etcd_cluster, etcd_cluster_factory, [per_lock_expiry]);
