//! What the PostgreSQL tests share: the server's URL, unique names,
//! lockers and plain clients.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use distlock_testkit::postgres::{shared_postgres_url, PgServer};
use distlock_testkit::with_query;
use lock_core::open::open_store;
use lock_core::Locker;
use lock_postgres::PgStore;
use tokio_postgres::{Client, NoTls};

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

/// The URL of `server` for lockers in `namespace`, with `options`
/// (`ttl=2s&…`).
pub(crate) fn url_on(server: &PgServer, namespace: &str, options: &str) -> String {
    with_query(&server.url(), &format!("namespace={namespace}&{options}"))
}

/// A locker on `url`.
pub(crate) async fn connect(url: &str) -> Locker {
    open_store::<PgStore>(url)
        .await
        .expect("open the PostgreSQL store")
}

/// A plain client on `url`, to look at and change rows from outside.
pub(crate) async fn raw(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("raw connection");
    tokio::spawn(connection);
    client
}

/// How many entries `namespace` has on the server at `url`.
pub(crate) async fn entries(url: &str, namespace: &str) -> i64 {
    raw(url)
        .await
        .query_one(
            "SELECT count(*) FROM distlock.entries WHERE namespace = $1",
            &[&namespace],
        )
        .await
        .unwrap()
        .get(0)
}
