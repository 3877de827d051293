//! The command on a layout shared with another client family, against
//! etcd's own `etcdctl` (Debian's etcd-client) on the testkit's etcd:
//! `distlock leader NAME --watch` follows an `etcdctl elect` leader in
//! `layout=concurrency`, and `etcdctl elect -l` shows a `distlock elect`
//! leader.

#![cfg(feature = "etcd")]

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use distlock_testkit::etcdctl::Etcdctl;
use serde_json::Value;

use common::etcd_url;
use common::running::Running;

/// An election name no other test uses (the namespace is not part of a
/// key in this layout).
fn unique_name(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("cli-peers/{test}-{}-{nanos}", std::process::id())
}

fn json_line(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
}

/// `distlock leader --watch --json` shows etcdctl's leader (its value, its
/// key as the owner), then nobody once etcdctl resigns.
#[test]
fn leader_watch_follows_an_etcdctl_leader() {
    let url = etcd_url("peer-leader", "layout=concurrency");
    let name = unique_name("leader-watch");
    let etcdctl = Etcdctl::for_url(&url).unwrap_or_else(|e| panic!("{e}"));
    let theirs = Running::spawn(etcdctl.elect(&name, "etcdctl leads"));
    let their_key = theirs.line("etcdctl's leader key");
    assert!(their_key.starts_with(&format!("{name}/")), "{their_key}");
    assert_eq!(theirs.line("etcdctl's value"), "etcdctl leads");

    let mut watch = Running::spawn(common::distlock_at(
        &url,
        &["leader", &name, "--watch", "--json"],
    ));
    let seen = json_line(&watch.line("etcdctl's leadership"));
    assert_eq!(seen["value"], "etcdctl leads", "{seen}");
    assert_eq!(seen["owner"], their_key.as_str(), "{seen}");
    theirs.signal(libc::SIGTERM); // etcdctl resigns before it exits
    let gone = json_line(&watch.line("etcdctl's resignation"));
    assert_eq!(gone["value"], Value::Null, "{gone}");
    watch.signal(libc::SIGINT);
    assert_eq!(watch.wait().code(), Some(0));
}

/// `etcdctl elect -l` shows a `distlock elect` leader's key and value.
#[test]
fn etcdctl_sees_a_distlock_elect_leader() {
    let url = etcd_url("peer-elect", "layout=concurrency");
    let name = unique_name("elect");
    let mut ours = Running::spawn(common::distlock_at(
        &url,
        &[
            "elect",
            &name,
            "--value",
            "distlock leads",
            "--",
            "sh",
            "-c",
            r#"echo "$DISTLOCK_TERM"; read x"#,
        ],
    ));
    ours.line("the leader's term");
    let etcdctl = Etcdctl::for_url(&url).unwrap_or_else(|e| panic!("{e}"));
    let listener = Running::spawn(etcdctl.observe(&name));
    let key = listener.line("the leader's key");
    assert!(key.starts_with(&format!("{name}/")), "{key}");
    assert_eq!(listener.line("the leader's value"), "distlock leads");
    ours.proceed();
    assert_eq!(ours.wait().code(), Some(0));
}
