//! The conformance suite against one real `redis-server` (shared by the
//! cases of this binary), opened by URL through the `distlock` facade. The
//! outage case reaches the server through a fault proxy of its own.

use conformance_tests::redis::{shared_redis_url, RedisFactory};

async fn redis_factory() -> RedisFactory {
    let base = shared_redis_url()
        .await
        .expect("a Redis server for the suite");
    let target = base
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .parse()
        .ok();
    RedisFactory {
        base,
        proxied: target.map(|addr| ("redis", vec![addr])),
    }
}

lock_core::conformance_tests!(redis, redis_factory);

/// The flags the suite picks cases by: a Redis lock expires on its own,
/// can be broken by an operator and wakes waiters across processes.
#[tokio::test]
async fn redis_declares_its_capabilities() {
    let locker = distlock::connect(&shared_redis_url().await.unwrap())
        .await
        .unwrap();
    let caps = locker.capabilities();
    assert!(
        caps.expiry
            && caps.per_lock_expiry
            && caps.force_release
            && caps.notified_wakeups
            && caps.remote
    );
    assert!(!caps.fifo);
}
