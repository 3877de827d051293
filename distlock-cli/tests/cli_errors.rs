//! Bad input ends with exit code 2 (or another non-zero code) and one
//! `distlock: ` line naming the problem: no usage dump, no panic, no
//! password.

mod common;

use std::time::{Duration, Instant};

use common::{distlock, one_line_message, output, Store};

/// Runs `distlock ARGS` and returns (exit code, the one stderr line).
fn fails(args: &[&str]) -> (Option<i32>, String) {
    let mut command = distlock();
    command.args(args);
    let out = output(command);
    (out.status.code(), one_line_message(&out))
}

fn assert_usage_error(args: &[&str], expected: &str) {
    let (code, message) = fails(args);
    assert_eq!(code, Some(2), "{args:?}: {message}");
    assert!(
        message.contains(expected),
        "{args:?}: expected {expected:?} in {message:?}"
    );
}

#[test]
fn run_without_double_dash_is_a_usage_error() {
    let store = Store::new();
    assert_usage_error(
        &["--url", &store.url, "run", "KEY", "echo", "hi"],
        "the command must come after `--`",
    );
    assert_usage_error(&["--url", &store.url, "run", "KEY"], "usage: distlock run");
}

#[test]
fn empty_key_is_a_usage_error() {
    let store = Store::new();
    assert_usage_error(
        &["--url", &store.url, "run", "", "--", "true"],
        "key is empty",
    );
}

#[test]
fn overlong_key_is_a_usage_error() {
    let store = Store::new();
    let key = "k".repeat(600);
    assert_usage_error(
        &["--url", &store.url, "run", &key, "--", "true"],
        "limit is 512",
    );
    assert_usage_error(&["--url", &store.url, "status", &key], "limit is 512");
}

#[test]
fn unknown_scheme_is_a_usage_error() {
    assert_usage_error(&["--url", "ftp://x", "run", "k", "--", "true"], "`ftp://`");
    assert_usage_error(&["--url", "ftp://x", "status", "k"], "`ftp://`");
    assert_usage_error(&["--url", "ftp://x", "check"], "`ftp://`");
    assert_usage_error(&["--url", "ftp://x", "bench"], "`ftp://`");
}

#[test]
fn bad_url_options_are_usage_errors() {
    assert_usage_error(
        &["--url", "mem://?ttl=abc", "run", "k", "--", "true"],
        "`ttl`",
    );
    assert_usage_error(
        &["--url", "mem://?ttl=0", "run", "k", "--", "true"],
        "`ttl`",
    );
    assert_usage_error(&["--url", "mem://?colour=red", "status", "k"], "`colour`");
}

#[test]
fn url_comes_from_the_environment_without_flag() {
    let mut command = distlock();
    command
        .env("DISTLOCK_URL", "ftp://from-env")
        .args(["status", "k"]);
    let out = output(command);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_line_message(&out).contains("ftp://"));
}

#[test]
fn backend_not_compiled_in_is_a_usage_error_without_the_password() {
    for url in [
        "redis://u:secret@127.0.0.1:1",
        "redis://u:secret@host:99999999",
    ] {
        let (code, message) = fails(&["--url", url, "run", "k", "--", "true"]);
        assert_eq!(code, Some(2), "{url}: {message}");
        assert!(
            !message.contains("secret"),
            "{url}: password shown: {message}"
        );
    }
    let (_, message) = fails(&["--url", "redis://u:secret@127.0.0.1:1", "status", "k"]);
    assert!(message.contains("`redis` feature"), "{message}");
}

#[test]
fn bad_durations_and_counts_are_usage_errors() {
    assert_usage_error(
        &["--url", "mem://", "run", "k", "--wait", "abc", "--", "true"],
        "--wait",
    );
    assert_usage_error(
        &[
            "--url", "mem://", "run", "k", "--grace", "soon", "--", "true",
        ],
        "--grace",
    );
    assert_usage_error(
        &[
            "--url",
            "mem://",
            "run",
            "k",
            "--on-lost",
            "panic",
            "--",
            "true",
        ],
        "--on-lost",
    );
    assert_usage_error(&["--url", "mem://", "bench", "--clients", "0"], "--clients");
    assert_usage_error(
        &["--url", "mem://", "bench", "--duration", "0s"],
        "--duration",
    );
    assert_usage_error(&["frobnicate"], "frobnicate");
}

#[test]
fn unusable_lock_directory_fails_fast_naming_the_path() {
    let store = Store::new();
    let file = store.path().join("a-regular-file");
    std::fs::write(&file, "").unwrap();
    let dir = file.join("locks");
    let url = format!("file://{}", dir.display());
    let started = Instant::now();
    let (code, message) = fails(&["--url", &url, "run", "k", "--", "true"]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_ne!(code, Some(0), "{message}");
    assert!(message.contains(&dir.display().to_string()), "{message}");
}

#[test]
fn check_filter_matching_nothing_is_a_usage_error() {
    assert_usage_error(
        &["--url", "mem://", "check", "--filter", "no-such-case"],
        "no-such-case",
    );
}
