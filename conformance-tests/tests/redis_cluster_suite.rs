//! The conformance suite against a 3-master Redis Cluster created for this
//! test binary with `redis-cli --cluster create`.
//!
//! The outage case is not run here: cluster nodes announce their own
//! addresses, so a client cannot be kept behind a fault proxy. The single
//! instance suite covers the connection handling, which is the same.

use conformance_tests::StoreFactory;
use distlock_testkit::redis::{shared_cluster_url, TEST_TIMEOUTS};
use distlock_testkit::with_query;

async fn cluster_factory() -> StoreFactory {
    let base = shared_cluster_url()
        .await
        .expect("a Redis Cluster for the suite");
    StoreFactory::new(with_query(&base, TEST_TIMEOUTS))
}

// Cluster clients follow the addresses the nodes announce, so they
// cannot be put behind the fault proxy.
lock_core::conformance_tests!(
    redis_cluster,
    cluster_factory,
    not_applicable: [
        unreachable_store_gives_unavailable_then_recovers,
        guard_dropped_while_unreachable_frees_the_lock_once_back,
    ]
);
