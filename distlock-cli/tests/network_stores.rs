//! `distlock check` and `distlock run` on real Redis, etcd, ZooKeeper and
//! PostgreSQL servers: the ones `distlock-testkit` starts, once per test
//! binary, on free loopback ports (or the running servers
//! `DISTLOCK_TEST_REDIS_URL`, `DISTLOCK_TEST_ETCD_URL`,
//! `DISTLOCK_TEST_ZK_URL` and `DISTLOCK_TEST_PG_URL` name). A server
//! that cannot be started fails the test with the testkit's message
//! saying what to install; it never passes silently.
//!
//! Each store's tests compile only with distlock-cli's cargo feature for
//! it (the `distlock` binary under test is built with the same features):
//! `cargo test -p distlock-cli` runs Redis, ZooKeeper and PostgreSQL,
//! `--all-features` adds etcd. Every test uses a namespace of its own, so they share the
//! servers and run in parallel.

#![cfg(any(
    feature = "redis",
    feature = "etcd",
    feature = "zookeeper",
    feature = "postgres"
))]

mod common;

#[cfg(feature = "redis")]
use distlock_testkit::with_query;

#[cfg(feature = "etcd")]
use common::etcd_url;
#[cfg(feature = "postgres")]
use common::postgres_url;
#[cfg(feature = "redis")]
use common::redis_url;
#[cfg(feature = "zookeeper")]
use common::zookeeper_url;
use common::{
    assert_check_passes, assert_concurrent_runs_never_lose_an_increment,
    assert_successive_tokens_increase, test_server, unique_options,
};

/// Concurrent `distlock run` processes per counter test, and runs each.
/// Every run connects afresh (a new connection, lease or session), so
/// fewer than on the file store.
const WORKERS: usize = 8;
const RUNS_PER_WORKER: usize = 8;
/// Successive runs whose tokens must increase.
const SUCCESSIVE_RUNS: usize = 5;
/// The ttl of the `run` tests' locks: a holder left behind by a failed
/// test stops blocking soon. (`check` ignores the URL's ttl and namespace:
/// each case opens its lockers with its own, see `UrlFactory`.)
const RUN_TTL: &str = "ttl=5s";

/// The tests every network store gets, in a module `$module` compiled with
/// distlock-cli's feature `$feature`, on URLs from `$url`: `check` passes
/// on the `$backend` backend, concurrent runs lose no increment, and
/// successive runs see increasing tokens.
macro_rules! network_store_tests {
    ($module:ident, $feature:literal, $url:ident, $backend:literal, $lease_shown:literal,
     $leftovers:ident) => {
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            #[test]
            fn check_passes_and_leaves_nothing() {
                let url = $url("check", "");
                assert_check_passes(&url, $backend);
                let left = test_server($leftovers(&url));
                assert!(left.is_empty(), "check left {left:?}");
            }

            #[test]
            fn concurrent_runs_never_lose_an_increment() {
                let url = $url("counter", RUN_TTL);
                assert_concurrent_runs_never_lose_an_increment(
                    &url,
                    "counter",
                    WORKERS,
                    RUNS_PER_WORKER,
                );
            }

            #[test]
            fn tokens_seen_by_successive_runs_increase() {
                let url = $url("tokens", RUN_TTL);
                assert_successive_tokens_increase(&url, "k", SUCCESSIVE_RUNS);
            }

            #[test]
            fn status_names_the_store_and_the_time_left() {
                assert_status_while_held(&$url("status", RUN_TTL), $backend, $lease_shown);
            }
        }
    };
}

// The time left is the lock's lease on Redis, the session lease's on
// etcd and the session row's on PostgreSQL; a ZooKeeper lock lives as
// long as its session, which tells no one else how long it has.
network_store_tests!(on_redis, "redis", redis_url, "redis", true, redis_leftovers);
network_store_tests!(on_etcd, "etcd", etcd_url, "etcd", true, etcd_leftovers);
network_store_tests!(
    on_zookeeper,
    "zookeeper",
    zookeeper_url,
    "zookeeper",
    false,
    zk_leftovers
);
network_store_tests!(
    on_postgres,
    "postgres",
    postgres_url,
    "postgres",
    true,
    pg_leftovers
);

/// `host:port` of a test URL (`scheme://host:port[/path][?query]`).
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or_default().to_owned()
}

/// The keys on the Redis server of `url` in namespaces `check` made
/// (`c-…`; only `check` makes such namespaces in this test binary).
#[cfg(feature = "redis")]
async fn redis_leftovers(url: &str) -> Result<Vec<String>, String> {
    let client =
        redis::Client::open(format!("redis://{}", host_port(url))).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    redis::cmd("KEYS")
        .arg("distlock:{c-*")
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())
}

/// The keys on the etcd server of `url` in namespaces `check` made.
#[cfg(feature = "etcd")]
async fn etcd_leftovers(url: &str) -> Result<Vec<String>, String> {
    let mut client = etcd_client::Client::connect([host_port(url)], None)
        .await
        .map_err(|e| e.to_string())?;
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_keys_only();
    let response = client
        .get("distlock/c-", Some(options))
        .await
        .map_err(|e| e.to_string())?;
    Ok(response
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect())
}

/// The nodes under the ZooKeeper base path of `url` for namespaces
/// `check` made.
#[cfg(feature = "zookeeper")]
async fn zk_leftovers(url: &str) -> Result<Vec<String>, String> {
    let client = zookeeper_client::Client::connect(&host_port(url))
        .await
        .map_err(|e| e.to_string())?;
    let children = match client.list_children("/distlock").await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(error) => return Err(error.to_string()),
    };
    Ok(children
        .into_iter()
        .filter(|c| c.starts_with("c-"))
        .collect())
}

/// The rows left in the test's own schema (the `schema` option of `url`)
/// on the PostgreSQL server of `url`: every entry (`namespace/key`) and
/// every session (`session <owner>`). The schema is dropped afterwards.
#[cfg(feature = "postgres")]
async fn pg_leftovers(url: &str) -> Result<Vec<String>, String> {
    let (server, query) = url.split_once('?').unwrap_or((url, ""));
    let schema = query
        .split('&')
        .find_map(|option| option.strip_prefix("schema="))
        .ok_or_else(|| format!("no schema option in {url}"))?;
    let (client, connection) = tokio_postgres::connect(server, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let rows = client
        .query(
            &format!(
                "SELECT namespace || '/' || key FROM \"{schema}\".entries \
                 UNION ALL SELECT 'session ' || owner FROM \"{schema}\".sessions"
            ),
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    client
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .map_err(|e| e.to_string())?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// `distlock status k --json`, run by CMD while `run` holds `k` on `url`:
/// held, by that run, on `backend`, with the time left on the lease where
/// the store can say (`lease_shown`).
fn assert_status_while_held(url: &str, backend: &str, lease_shown: bool) {
    let status = format!(
        "{} --url '{url}' status k --json",
        env!("CARGO_BIN_EXE_distlock")
    );
    let out = common::output(common::distlock_at(
        url,
        &["run", "k", "--", "sh", "-c", &status],
    ));
    let text = common::stdout(&out);
    assert!(out.status.success(), "{text}{}", common::stderr(&out));
    let json: serde_json::Value = serde_json::from_str(text.trim()).expect("status --json is JSON");
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(json["backend"], backend, "{json}");
    let left = json["ttl_left_ms"].as_u64();
    if lease_shown {
        assert!(left.is_some_and(|ms| ms > 0 && ms <= 5_000), "{json}");
    } else {
        assert!(json["ttl_left_ms"].is_null(), "{json}");
    }
}

/// A host-list URL: `check` must pass it through intact (the `url` crate
/// alone rejects `a:1,b:2,c:3`).
#[cfg(feature = "redis")]
#[test]
fn check_passes_on_redlock_over_three_masters() {
    let masters = test_server(distlock_testkit::redis::shared_redlock_servers(3));
    let base = distlock_testkit::redis::redlock_url(masters.iter().map(|m| m.addr()));
    assert_check_passes(
        &with_query(&base, &unique_options("redlock", "")),
        "redlock",
    );
}
