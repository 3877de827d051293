//! `distlock check` against a ZooKeeper set up as a user's would be: the
//! sample configuration's tick (session timeouts of 4 to 40 s) and
//! ZooKeeper's default limits, 60 connections per client address among
//! them. The suite runs its cases side by side; it must stay within that
//! limit (every locker is a session, and so a connection), and a passing
//! run must leave nothing on the terminal (the ZooKeeper client's
//! warnings about its own reconnection attempts among them).
//!
//! The server is started here, never taken from `DISTLOCK_TEST_ZK_URL`:
//! the test is about its settings. The two tests take turns: two checks at
//! once from one address would need twice the connections.

#![cfg(feature = "zookeeper")]

mod common;

use std::process::Output;
use std::sync::Mutex;

use common::{
    assert_check_passed, distlock_at, output_within, stderr, stdout, test_server, unique_options,
    CHECK_LIMIT,
};
use distlock_testkit::shared_server;
use distlock_testkit::zookeeper::{standalone_spec_with, zk_url, ZkSettings};

/// One `distlock check` at a time against the server.
static ONE_CHECK_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `distlock check` (with the default log filter) against this
/// binary's stock ZooKeeper, in a namespace of `test`'s own.
fn check_on_stock_zookeeper(test: &str) -> Output {
    let url = zk_url(&[stock_zookeeper()], "", &unique_options(test, ""));
    let _turn = ONE_CHECK_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    output_within(distlock_at(&url, &["check"]), CHECK_LIMIT)
}

/// This binary's ZooKeeper with the sample configuration's settings.
fn stock_zookeeper() -> std::net::SocketAddr {
    let server = test_server(shared_server("zookeeper-stock", || {
        standalone_spec_with(ZkSettings::stock())
    }));
    server.addr()
}

/// In a layout shared with another client family the namespace is not
/// part of a key, so the cases could not keep apart from the names live
/// clients use: the check refuses it, saying why and what to do, and
/// touches nothing.
#[test]
fn check_refuses_a_layout_shared_with_other_clients() {
    let url = zk_url(&[stock_zookeeper()], "/", "layout=curator");
    let out = output_within(distlock_at(&url, &["check"]), CHECK_LIMIT);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("option `layout`"), "{said}");
    assert!(said.contains("without `layout`"), "{said}");
    assert!(!stdout(&out).contains("passed"), "{}", stdout(&out));
}

#[test]
fn check_passes_on_a_zookeeper_with_default_limits() {
    assert_check_passed(&check_on_stock_zookeeper("limits"), "zookeeper");
}

#[test]
fn a_passing_check_prints_no_zookeeper_client_warnings() {
    let out = check_on_stock_zookeeper("quiet");
    assert!(out.status.success(), "check failed:\n{}", stdout(&out));
    let errors = stderr(&out);
    let noise: Vec<&str> = errors
        .lines()
        .filter(|line| {
            ["session expired", "fails to establish", "fail to connect"]
                .iter()
                .any(|words| line.contains(words))
        })
        .collect();
    assert!(
        noise.is_empty(),
        "a passing check printed {noise:#?}\nstderr:\n{errors}"
    );
}
