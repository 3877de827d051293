//! The conformance suite against the master of a Redis Sentinel group (a
//! master, its replica and three sentinels) started for this test binary,
//! reached through the sentinels by a `redis+sentinel://` URL.
//!
//! The outage cases are not run here: the sentinels name the master's own
//! address, so a client cannot be kept behind a fault proxy. The single
//! instance suite covers the connection handling; following the master
//! across a failover is tested in the Redis store's own tests.

use conformance_tests::StoreFactory;
use distlock_testkit::redis::TEST_TIMEOUTS;
use distlock_testkit::redis_sentinel::shared_sentinel_url;
use distlock_testkit::with_query;

async fn sentinel_factory() -> StoreFactory {
    let base = shared_sentinel_url()
        .await
        .expect("a Redis Sentinel group for the suite");
    StoreFactory::new(with_query(&base, TEST_TIMEOUTS))
}

// The sentinels hand out the master's own address, so the client cannot
// be put behind the fault proxy.
lock_core::conformance_tests!(
    redis_sentinel,
    sentinel_factory,
    not_applicable: [
        unreachable_store_gives_unavailable_then_recovers,
        guard_dropped_while_unreachable_frees_the_lock_once_back,
    ]
);
