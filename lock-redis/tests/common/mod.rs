//! What the tests of this crate share.

#![allow(dead_code)] // not every test binary uses everything

pub(crate) mod helper;

use std::fmt::Display;
use std::time::Duration;

use distlock_testkit::redis::TEST_TIMEOUTS;
use distlock_testkit::{Server, ServerSpec};
use lock_core::open::open_store;
use lock_core::{LockError, LockInfo, Locker};
use lock_redis::RedisStore;

/// Opens a locker on the Redis deployment `url` names, without the
/// `distlock` facade.
pub(crate) async fn connect(url: &str) -> Result<Locker, LockError> {
    open_store::<RedisStore>(url).await
}

/// The URL of the server at `addr`, with leases of `ttl`, keys in
/// `namespace` and the tests' short timeouts.
pub(crate) fn server_url(addr: impl Display, namespace: &str, ttl: Duration) -> String {
    format!(
        "redis://{addr}?ttl={}ms&namespace={namespace}&{TEST_TIMEOUTS}",
        ttl.as_millis()
    )
}

/// Starts the dedicated server `spec` describes.
pub(crate) async fn start(spec: Result<ServerSpec, String>) -> Server {
    spec.unwrap().start().await.unwrap()
}

/// The holder of `key` as `locker` sees it; panics with `why` where the
/// lock is free.
pub(crate) async fn holder_of(locker: &Locker, key: &str, why: &str) -> LockInfo {
    locker.inspect(key).await.unwrap().expect(why)
}

/// A raw connection to the shared test server, for looking at a lock's
/// keys from outside distlock.
pub(crate) async fn raw_redis() -> ::redis::aio::MultiplexedConnection {
    let url = distlock_testkit::redis::shared_redis_url().await.unwrap();
    raw_connection(&url).await
}

/// A raw connection to the server `url` names, for looking at a lock's
/// keys from outside distlock.
pub(crate) async fn raw_connection(url: &str) -> ::redis::aio::MultiplexedConnection {
    ::redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
