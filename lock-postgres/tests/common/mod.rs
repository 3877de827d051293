//! What the PostgreSQL tests share: the server's URL and unique names.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The variable naming the test server.
pub(crate) const PG_URL_VAR: &str = "DISTLOCK_TEST_PG_URL";

/// The test server's URL (`postgres://user@host:port/db`), from
/// `DISTLOCK_TEST_PG_URL`.
///
/// # Panics
///
/// When the variable is unset: these tests need a real server and never
/// pass without one.
pub(crate) fn pg_url() -> String {
    std::env::var(PG_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{PG_URL_VAR} is not set: these tests need a PostgreSQL server, e.g. \
             {PG_URL_VAR}=postgres://postgres@127.0.0.1:5432/postgres"
        )
    })
}

/// The test server's URL with `query` (`a=b&c=d`) appended.
pub(crate) fn pg_url_with(query: &str) -> String {
    let url = pg_url();
    let joiner = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joiner}{query}")
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

/// The variable naming the PEM file of the CA that signed the test
/// server's certificate (issued for `localhost`).
pub(crate) const PG_TLS_CA_VAR: &str = "DISTLOCK_TEST_PG_TLS_CA";

/// The CA file of the test server's certificate, from
/// `DISTLOCK_TEST_PG_TLS_CA`.
///
/// # Panics
///
/// When the variable is unset: the TLS tests need a server with TLS on.
pub(crate) fn pg_tls_ca() -> String {
    std::env::var(PG_TLS_CA_VAR).unwrap_or_else(|_| {
        panic!(
            "{PG_TLS_CA_VAR} is not set: the TLS tests need the test server to run with \
             ssl=on and a certificate for `localhost` signed by this CA (PEM file)"
        )
    })
}
