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

/// [`assert_usage_error`] for `distlock --url URL ARGS`.
fn assert_usage_error_at(url: &str, args: &[&str], expected: &str) {
    let mut full = vec!["--url", url];
    full.extend_from_slice(args);
    assert_usage_error(&full, expected);
}

/// [`assert_usage_error`] for `distlock --url mem:// ARGS`.
fn assert_usage_error_in_memory(args: &[&str], expected: &str) {
    assert_usage_error_at("mem://", args, expected);
}

/// [`assert_usage_error`] for `distlock --url <a fresh file store> ARGS`.
fn assert_usage_error_on_a_store(args: &[&str], expected: &str) {
    assert_usage_error_at(&Store::new().url, args, expected);
}

#[test]
fn run_without_double_dash_is_a_usage_error() {
    assert_usage_error_on_a_store(
        &["run", "KEY", "echo", "hi"],
        "the command must come after `--`",
    );
    assert_usage_error_on_a_store(&["run", "KEY"], "usage: distlock run");
}

#[test]
fn empty_key_is_a_usage_error() {
    assert_usage_error_on_a_store(&["run", "", "--", "true"], "key is empty");
}

#[test]
fn overlong_key_is_a_usage_error() {
    let key = "k".repeat(600);
    assert_usage_error_on_a_store(&["run", &key, "--", "true"], "limit is 512");
    assert_usage_error_on_a_store(&["status", &key], "limit is 512");
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
    assert_usage_error_at("mem://?ttl=abc", &["run", "k", "--", "true"], "`ttl`");
    assert_usage_error_at("mem://?ttl=0", &["run", "k", "--", "true"], "`ttl`");
    assert_usage_error_at("mem://?colour=red", &["status", "k"], "`colour`");
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

/// A Redis URL with a password and a bad option or port is a usage error
/// in every build: with the `redis` store compiled in, the URL or Redis
/// parser rejects it; without it, the facade names the feature to enable
/// (feature unification across the workspace often compiles Redis in, so
/// this test must not depend on which). Either way no server is needed,
/// and the password never shows. The facade's own unit tests cover the
/// message of a store that is not compiled in.
#[test]
fn bad_redis_url_is_a_usage_error_without_the_password() {
    let not_compiled = "`redis` feature";
    let cases: [(&str, &[&str]); 4] = [
        // Option errors common to every store come before the store.
        (
            "redis://u:secret@127.0.0.1:1/?ttl=soon",
            &["option `ttl`: `soon` is not a duration"],
        ),
        // The URL itself does not parse.
        ("redis://u:secret@host:99999999", &["invalid port number"]),
        // Percent-encoded password, unknown option of the Redis store.
        (
            "redis://u:s%40cret@127.0.0.1:1?colour=red",
            &["unknown option `colour`", not_compiled],
        ),
        // The password as an option.
        (
            "redis://127.0.0.1:1?password=secret&colour=red",
            &["unknown option `colour`", not_compiled],
        ),
    ];
    for (url, expected) in cases {
        for command in [
            &["run", "k", "--", "true"][..],
            &["status", "k"],
            &["check"],
            &["bench", "--duration", "1s"],
        ] {
            let mut args = vec!["--url", url];
            args.extend_from_slice(command);
            let (code, message) = fails(&args);
            assert_eq!(code, Some(2), "{args:?}: {message}");
            assert!(
                ["secret", "s@cret", "s%40cret"]
                    .iter()
                    .all(|password| !message.contains(password)),
                "{args:?}: password shown: {message}"
            );
            assert!(
                expected.iter().any(|part| message.contains(part)),
                "{args:?}: expected one of {expected:?} in {message:?}"
            );
        }
    }
}

#[test]
fn bad_durations_and_counts_are_usage_errors() {
    assert_usage_error_in_memory(&["run", "k", "--wait", "abc", "--", "true"], "--wait");
    assert_usage_error_in_memory(&["run", "k", "--grace", "soon", "--", "true"], "--grace");
    assert_usage_error_in_memory(
        &["run", "k", "--on-lost", "panic", "--", "true"],
        "--on-lost",
    );
    assert_usage_error_in_memory(&["bench", "--clients", "0"], "--clients");
    assert_usage_error_in_memory(&["bench", "--duration", "0s"], "--duration");
    assert_usage_error_in_memory(&["bench", "--hold", "5", "--clients", "2"], "--clients");
    assert_usage_error_in_memory(&["bench", "--hold", "0"], "--hold");
    assert_usage_error_in_memory(&["bench", "--hold-for", "1s"], "--hold");
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
    assert_usage_error_in_memory(&["check", "--filter", "no-such-case"], "no-such-case");
}

#[test]
fn missing_arguments_are_named() {
    assert_usage_error_in_memory(&["run", "k"], "not provided: <CMD>...");
    assert_usage_error_in_memory(&["run"], "not provided: <KEY>, <CMD>...");
    assert_usage_error_in_memory(&["status"], "not provided: <KEY>");
    assert_usage_error_in_memory(
        &["run", "k", "--wait", "--", "true"],
        "a value is required for '--wait <DUR>'",
    );
}

#[test]
fn a_bad_choice_lists_the_valid_ones() {
    assert_usage_error_in_memory(
        &["run", "k", "--on-lost", "maybe", "--", "true"],
        "possible values: kill, ignore",
    );
}

#[test]
fn durations_take_bare_seconds_and_refuse_negatives() {
    let mut run = distlock();
    run.args([
        "--url", "mem://", "run", "k", "--wait", "5", "--grace", "0.5", "--", "true",
    ]);
    let out = output(run);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_usage_error_in_memory(
        &["run", "k", "--wait", "-1s", "--", "true"],
        "`-1s` is negative",
    );
    assert_usage_error_in_memory(
        &["run", "k", "--grace", "-3", "--", "true"],
        "`-3` is negative",
    );
}

#[test]
fn an_unwritable_metrics_file_is_refused_before_cmd_runs() {
    let store = Store::new();
    let ran = store.scratch("ran");
    let missing = store.path().join("no-such-dir").join("m.prom");
    let script = format!("touch {}", ran.display());
    let (code, message) = fails(&[
        "--url",
        &store.url,
        "--metrics-file",
        missing.to_str().unwrap(),
        "run",
        "k",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(code, Some(2), "{message}");
    assert!(
        message.contains("the directory")
            && message.contains("no-such-dir")
            && message.contains("does not exist"),
        "{message}"
    );
    assert!(
        !message.contains("no-such-dir/."),
        "names a temporary file: {message}"
    );
    assert!(
        !ran.exists(),
        "CMD ran although its metrics could not be written"
    );
}
