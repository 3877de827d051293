//! `distlock run --shared` (read locks) and `--permits N` (one of N), and
//! `status` listing every reader and permit holder, on the file store.

mod common;

use std::process::Child;

use common::*;

/// Spawns `distlock run KEY FLAGS -- sh -c 'touch READY; sleep 30'` and
/// waits until its command runs.
fn hold(store: &Store, key: &str, flags: &[&str], ready: &str) -> Child {
    let ready = store.scratch(ready);
    let script = format!("touch '{}'; exec sleep 30", ready.display());
    store.hold_with(key, flags, &script, &ready)
}

fn stop(mut child: Child) {
    signal(child.id(), libc::SIGTERM);
    wait(&mut child);
}

fn stdout_of(store: &Store, args: &[&str]) -> String {
    let out = output(store.distlock(args));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn shared_runs_overlap_and_keep_plain_runs_out() {
    let store = Store::new();
    let first = hold(&store, "cfg", &["--shared"], "first");
    let second = hold(&store, "cfg", &["--shared", "--wait", "5s"], "second");
    let status = stdout_of(&store, &["status", "cfg"]);
    assert!(status.starts_with("cfg: read by 2 readers\n"), "{status}");
    let json: serde_json::Value =
        serde_json::from_str(&stdout_of(&store, &["status", "cfg", "--json"])).unwrap();
    assert_eq!(json["kind"], "shared", "{json}");
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(2), "{json}");

    let plain = output(store.distlock(&["run", "cfg", "--wait", "0", "--", "true"]));
    assert_eq!(plain.status.code(), Some(75), "{}", stderr(&plain));
    stop(first);
    stop(second);
    let plain = output(store.distlock(&["run", "cfg", "--wait", "5s", "--", "true"]));
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
}

#[test]
fn permits_let_n_runs_in_and_no_more() {
    let store = Store::new();
    let first = hold(&store, "pool", &["--permits", "2"], "first");
    let second = hold(
        &store,
        "pool",
        &["--permits", "2", "--wait", "5s"],
        "second",
    );
    let third =
        output(store.distlock(&["run", "pool", "--permits", "2", "--wait", "0", "--", "true"]));
    assert_eq!(third.status.code(), Some(75), "{}", stderr(&third));
    let message = one_line_message(&third);
    assert!(
        message.contains("semaphore \"pool\" has all 2 permits held"),
        "{message}"
    );
    let other =
        output(store.distlock(&["run", "pool", "--permits", "3", "--wait", "0", "--", "true"]));
    assert_eq!(other.status.code(), Some(2), "{}", stderr(&other));
    assert!(
        one_line_message(&other).contains("held with a limit of 2 permits, not 3"),
        "{}",
        stderr(&other)
    );
    // The semaphore is not the lock of the same name.
    let plain = output(store.distlock(&["run", "pool", "--wait", "0", "--", "true"]));
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    let status = stdout_of(&store, &["status", "pool", "--permits"]);
    assert!(
        status.starts_with("pool: 2 of 2 permits held\n"),
        "{status}"
    );
    stop(first);
    let now = output(store.distlock(&[
        "run",
        "pool",
        "--permits",
        "2",
        "--wait",
        "5s",
        "--",
        "true",
    ]));
    assert_eq!(now.status.code(), Some(0), "{}", stderr(&now));
    stop(second);
}

#[test]
fn bad_permit_counts_and_mixed_flags_are_usage_errors() {
    let store = Store::new();
    for args in [
        &["run", "k", "--permits", "0", "--", "true"][..],
        &["run", "k", "--permits", "1025", "--", "true"],
        &["run", "k", "--shared", "--permits", "2", "--", "true"],
    ] {
        let out = output(store.distlock(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
}
