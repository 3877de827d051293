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

/// Waiters that give up in the middle of the queue: the others are handed
/// the lock one at a time, in queue order, on a cluster too (the line
/// lives with the lock on its master; see `conformance_tests::queue`).
mod queue_order {
    use conformance_tests::queue::{check_queue, Shape, QUEUE_KEY};
    use distlock::lock_redis::keys::LockKeys;
    use distlock::Locker;

    async fn check(namespace: &str, shape: Shape) {
        let base = super::shared_cluster_url().await.unwrap();
        let url = format!("{base}?ttl=10s&namespace={namespace}");
        let nodes: Vec<String> = base
            .trim_start_matches("redis+cluster://")
            .split(',')
            .map(|host| format!("redis://{host}"))
            .collect();
        let raw = ::redis::cluster::ClusterClient::new(nodes)
            .unwrap()
            .get_async_connection()
            .await
            .unwrap();
        let open = || async { distlock::connect(&url).await.unwrap() };
        let queued = |holder: Locker| {
            let mut raw = raw.clone();
            async move {
                let keys = LockKeys::new(&holder.name(QUEUE_KEY).unwrap());
                let line: Vec<String> = ::redis::cmd("LRANGE")
                    .arg(&keys.queue)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                let places: Vec<String> = ::redis::cmd("HKEYS")
                    .arg(&keys.waiters)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                line.into_iter().filter(|o| places.contains(o)).collect()
            }
        };
        check_queue(open, queued, shape).await;
    }

    conformance_tests::queue_order_tests!("clusterq", check);
}
