//! The conformance suite against a 3-master Redis Cluster created for this
//! test binary with `redis-cli --cluster create`.
//!
//! The outage case is not run here: cluster nodes announce their own
//! addresses, so a client cannot be kept behind a fault proxy. The single
//! instance suite covers the connection handling, which is the same.

#[macro_use]
mod common;

use conformance_tests::StoreFactory;
use distlock_testkit::redis::shared_cluster_url;

async fn cluster_factory() -> StoreFactory {
    common::redis_factory(&shared_cluster_url().await, "a Redis Cluster")
}

conformance_tests_lacking!(redis_cluster, cluster_factory, [outages]);
