//! The conformance suite against the master of a Redis Sentinel group (a
//! master, its replica and three sentinels) started for this test binary,
//! reached through the sentinels by a `redis+sentinel://` URL.
//!
//! The outage cases are not run here: the sentinels name the master's own
//! address, so a client cannot be kept behind a fault proxy. The single
//! instance suite covers the connection handling; following the master
//! across a failover is tested in the Redis store's own tests.

#[macro_use]
mod common;

use conformance_tests::StoreFactory;
use distlock_testkit::redis_sentinel::shared_sentinel_url;

async fn sentinel_factory() -> StoreFactory {
    common::redis_factory(&shared_sentinel_url().await, "a Redis Sentinel group")
}

conformance_tests_lacking!(redis_sentinel, sentinel_factory, [outages]);
