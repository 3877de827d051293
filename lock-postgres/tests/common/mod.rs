//! What the PostgreSQL tests share: the server's URL and unique names.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use distlock_testkit::postgres::shared_postgres_url;
use distlock_testkit::with_query;

/// The URL of this test binary's shared server
/// (`postgres://user:password@127.0.0.1:port/db`): a server the testkit
/// starts on first use, or the one `DISTLOCK_TEST_PG_URL` names.
///
/// # Panics
///
/// When no server can be started (PostgreSQL missing): these tests need a
/// real server and never pass without one.
pub(crate) async fn pg_url() -> String {
    shared_postgres_url()
        .await
        .unwrap_or_else(|e| panic!("a PostgreSQL server for the tests: {e}"))
}

/// The shared server's URL with `query` (`a=b&c=d`) appended.
pub(crate) async fn pg_url_with(query: &str) -> String {
    with_query(&pg_url().await, query)
}

/// A name no other test (or run) uses: `prefix` and a unique suffix, in
/// lowercase letters, digits and `_` (also a valid schema name).
pub(crate) fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}_{}_{nanos}_{n}", std::process::id())
}
