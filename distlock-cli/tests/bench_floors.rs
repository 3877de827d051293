//! `distlock bench` on real Redis (one instance, a cluster, Redlock over
//! three masters), etcd, ZooKeeper and PostgreSQL servers: every store's raw floor
//! connects with the URL's settings and is measured next to distlock.
//! The servers are the ones `distlock-testkit` starts once per test
//! binary on free loopback ports (or the running servers its environment
//! variables name); one that cannot be started fails the test with the
//! testkit's message saying what to install.
//!
//! Each store's tests compile only with distlock-cli's cargo feature for
//! it, as the `distlock` binary under test is built with the same ones.

#![cfg(any(
    feature = "redis",
    feature = "etcd",
    feature = "zookeeper",
    feature = "postgres"
))]

mod common;

use common::{output_within, stderr, stdout, test_server, LIMIT};

/// Runs a short `bench --json` on `url` and checks that the floor `probe`
/// was measured in both the latency and the throughput test; returns the
/// report.
fn assert_floor_measured(url: &str, backend: &str, probe: &str) -> serde_json::Value {
    let args = [
        "bench",
        "--duration",
        "900ms",
        "--clients",
        "2",
        "--keys",
        "4",
        "--json",
    ];
    let out = output_within(common::distlock_at(url, &args), LIMIT);
    assert!(out.status.success(), "bench on {url}: {}", stderr(&out));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&out)).expect("bench --json is JSON");
    assert_eq!(json["backend"], backend, "{json}");
    assert_eq!(json["probe"], probe, "{json}");
    let floor = &json["floor"];
    assert!(floor["uncontended"]["n"].as_u64() > Some(0), "{json}");
    assert!(floor["p50_ratio"].as_f64() > Some(0.0), "{json}");
    assert!(floor["throughput"]["ops"].as_u64() > Some(0), "{json}");
    assert!(floor["throughput_ratio"].is_number(), "{json}");
    json
}

#[cfg(feature = "redis")]
#[test]
fn the_redis_floor_is_set_nx_and_del() {
    let url = test_server(distlock_testkit::redis::shared_redis_url());
    assert_floor_measured(&url, "redis", "SET NX PX + DEL");
}

#[cfg(feature = "redis")]
#[test]
fn the_redis_cluster_floor_runs_through_the_cluster() {
    let url = test_server(distlock_testkit::redis::shared_cluster_url());
    assert_floor_measured(&url, "redis-cluster", "SET NX PX + DEL");
}

#[cfg(feature = "redis")]
#[test]
fn the_redlock_floor_runs_on_every_master() {
    let masters = test_server(distlock_testkit::redis::shared_redlock_servers(3));
    let url = distlock_testkit::redis::redlock_url(masters.iter().map(|m| m.addr()));
    assert_floor_measured(&url, "redlock", "SET NX PX + DEL on 3 masters in parallel");
}

#[cfg(feature = "etcd")]
#[test]
fn the_etcd_floor_is_a_put_if_absent_and_a_delete() {
    let url = test_server(distlock_testkit::etcd::shared_etcd_url());
    assert_floor_measured(
        &url,
        "etcd",
        "txn(create_revision == 0 → put) + delete: 2 etcd writes",
    );
}

#[cfg(feature = "zookeeper")]
#[test]
fn the_zookeeper_floor_creates_and_deletes_a_sequential_node() {
    let addrs = test_server(distlock_testkit::zookeeper::shared_standalone());
    let url = distlock_testkit::zookeeper::zk_url(&addrs, "", "");
    assert_floor_measured(&url, "zookeeper", "create EPHEMERAL_SEQUENTIAL + delete");
}

/// The durable floor, with the advisory-lock pair measured beside it; the
/// run leaves no row of its namespace in the floor's table.
#[cfg(feature = "postgres")]
#[test]
fn the_postgres_floor_inserts_and_deletes_a_row_beside_the_advisory_pair() {
    let base = test_server(distlock_testkit::postgres::shared_postgres_url());
    let json = assert_floor_measured(
        &base,
        "postgres",
        "INSERT … RETURNING id + DELETE: 2 autocommit statements on a table",
    );
    let beside = &json["floor"]["beside"];
    assert!(
        json["beside"]
            .as_str()
            .is_some_and(|b| b.starts_with("pg_advisory_lock + pg_advisory_unlock")),
        "{json}"
    );
    assert!(beside["uncontended"]["n"].as_u64() > Some(0), "{json}");
    assert!(beside["p50_ratio"].as_f64() > Some(0.0), "{json}");
    let namespace = json["namespace"].as_str().expect("the run's namespace");
    let left = test_server(async {
        let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT count(*) FROM distlock_floor.holds WHERE namespace = $1",
                &[&namespace],
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok::<i64, String>(row.get(0))
    });
    assert_eq!(left, 0, "the floor left rows of {namespace}");
}
