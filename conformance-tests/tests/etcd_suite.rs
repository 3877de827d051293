//! The conformance suite against etcd, opened by URL through the `distlock`
//! facade: on one shared single member (`etcd::…`) and on one shared
//! 3-member cluster (`etcd_cluster::…`), both spawned by the harness.

use conformance_tests::etcd::{shared_cluster, shared_etcd_url, EtcdFactory};
use conformance_tests::harness::{env_override, ETCD_URL_VAR};
use distlock::Capabilities;

async fn etcd_factory() -> EtcdFactory {
    let url = shared_etcd_url().await.expect("etcd test server");
    // A server from DISTLOCK_TEST_ETCD_URL cannot be put behind a proxy we
    // know the target of; the outage case then reports itself not applicable.
    let members = match env_override(ETCD_URL_VAR) {
        Some(_) => Vec::new(),
        None => distlock::LockUrl::parse(&url)
            .expect("etcd URL")
            .hosts
            .iter()
            .map(|h| h.to_string().parse().expect("loopback address"))
            .collect(),
    };
    EtcdFactory::new(url, members)
}

async fn etcd_cluster_factory() -> EtcdFactory {
    let members: Vec<_> = shared_cluster()
        .await
        .expect("etcd test cluster")
        .iter()
        .map(|server| server.addr())
        .collect();
    EtcdFactory::new(conformance_tests::etcd::etcd_url(members.clone()), members)
}

lock_core::conformance_tests!(etcd, etcd_factory);
lock_core::conformance_tests!(etcd_cluster, etcd_cluster_factory);

/// Pins the flags, so none flips unnoticed: locks live as long as the
/// session lease (no per-lock expiry); everything else etcd does.
#[tokio::test]
async fn etcd_declares_its_capabilities() {
    let url = shared_etcd_url().await.expect("etcd test server");
    let locker = distlock::connect(&url).await.unwrap();
    let caps = locker.capabilities();
    let mut expected = Capabilities::default();
    expected.expiry = true;
    expected.force_release = true;
    expected.notified_wakeups = true;
    expected.fifo = true;
    expected.remote = true;
    assert_eq!(caps, expected);
}
