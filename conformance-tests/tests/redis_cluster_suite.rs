//! The conformance suite against a 3-master Redis Cluster created for this
//! test binary with `redis-cli --cluster create`.
//!
//! The outage case is not run here: cluster nodes announce their own
//! addresses, so a client cannot be kept behind a fault proxy. The single
//! instance suite covers the connection handling, which is the same.

use conformance_tests::redis::{shared_cluster_url, RedisFactory};

async fn cluster_factory() -> RedisFactory {
    RedisFactory {
        base: shared_cluster_url()
            .await
            .expect("a Redis Cluster for the suite"),
        proxied: None,
    }
}

lock_core::conformance_tests!(redis_cluster, cluster_factory);

/// A lock, its token counter and its channel hash to one slot, whatever
/// the key: the scripts touch lock and counter together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_with_braces_work_on_a_cluster() {
    let url = shared_cluster_url().await.unwrap();
    let locker = distlock::connect(&format!("{url}?namespace=braces&ttl=2s"))
        .await
        .unwrap();
    assert_eq!(locker.backend_name(), "redis-cluster");
    for key in ["{", "}", "a}b{c", "{x}", "}{", "%7D"] {
        let guard = locker.try_lock(key).await.unwrap().expect("free");
        let info = locker.inspect(key).await.unwrap().expect("held");
        assert_eq!(info.token, guard.token(), "{key}");
        guard.release().await.unwrap();
    }
}
