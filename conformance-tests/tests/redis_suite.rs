//! The conformance suite against one real `redis-server` (shared by the
//! cases of this binary), opened by URL through the `distlock` facade. The
//! outage case reaches the server through a fault proxy of its own.

use conformance_tests::StoreFactory;
use distlock_testkit::redis::{shared_redis_url, TEST_TIMEOUTS};
use distlock_testkit::{loopback_hosts, with_query};

async fn redis_factory() -> StoreFactory {
    let base = shared_redis_url()
        .await
        .expect("a Redis server for the suite");
    StoreFactory::new(with_query(&base, TEST_TIMEOUTS)).outage_through(loopback_hosts(&base))
}

lock_core::conformance_tests!(redis, redis_factory, not_applicable: []);
