//! `distlock elect`, `distlock leader` and the value in `distlock status`,
//! across real processes: on the file store, and on the Redis, etcd and
//! ZooKeeper servers `distlock-testkit` starts (each with distlock-cli's
//! cargo feature for it, as in `network_stores.rs`).
//!
//! CMDs report to the test on stdout (their term, `finished`) and wait on
//! stdin (`read x`) until the test lets them go on, so every step waits on
//! something observable.

mod common;

use std::fs;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::running::Running;
use common::{one_line_message, output, stderr, stdout};

/// A store the election tests run on, and a scratch directory.
struct Target {
    url: String,
    /// The file store's directory; `None` on a network store.
    dir: Option<tempfile::TempDir>,
    scratch: tempfile::TempDir,
}

impl Target {
    /// A file store with a 300 ms ttl: a lock whose file is deleted is
    /// found lost within 100 ms.
    fn file(_test: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("file://{}?ttl=300ms", dir.path().display());
        Self {
            url,
            dir: Some(dir),
            scratch: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn network(url: String) -> Self {
        Self {
            url,
            dir: None,
            scratch: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// `distlock --url URL ARGS...`.
    fn distlock(&self, args: &[&str]) -> Command {
        common::distlock_at(&self.url, args)
    }

    /// Starts `distlock elect NAME FLAGS... -- sh -c SCRIPT sh ARGS...`.
    fn elect(&self, name: &str, flags: &[&str], script: &str, args: &[&str]) -> Running {
        let mut command = self.distlock(&["elect", name]);
        command
            .args(flags)
            .args(["--", "sh", "-c", script, "sh"])
            .args(args);
        Running::spawn(command)
    }

    /// Takes the lock `key` away from its holder: the file store's files
    /// are deleted, a network store's lock is force-released.
    fn take_away(&self, key: &str) {
        if let Some(dir) = &self.dir {
            for entry in fs::read_dir(dir.path()).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    fs::remove_dir_all(&path).unwrap();
                }
            }
            return;
        }
        let removed = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(async {
                let locker = distlock::connect(&self.url).await?;
                locker.force_release(key).await
            })
            .expect("force release");
        assert!(removed, "no lock {key:?} to take away");
    }

    /// `leader NAME --json`, parsed.
    fn leader_json(&self, name: &str) -> Value {
        let out = output(self.distlock(&["leader", name, "--json"]));
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_str(stdout(&out).trim()).expect("one JSON object")
    }
}

/// Prints the term, waits for the test, then says `finished`.
const LEAD_UNTIL_TOLD: &str = r#"echo "$DISTLOCK_TERM"; read x; echo finished"#;

fn term(line: &str) -> u64 {
    line.parse()
        .unwrap_or_else(|_| panic!("not a term: {line:?}"))
}

fn json_line(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
}

fn no_leader(name: &str) -> Value {
    json!({"name": name, "value": null, "term": null, "owner": null})
}

/// Checks a `leader --json` object: exactly the four fields, the value
/// and term given, an owner naming distlock's `pid`.
fn assert_leader(object: &Value, name: &str, value: &str, term: u64, pid: u32) {
    let fields = object.as_object().expect("an object");
    assert_eq!(fields.len(), 4, "{object}");
    assert_eq!(object["name"], name, "{object}");
    assert_eq!(object["value"], value, "{object}");
    assert_eq!(object["term"], term, "{object}");
    let owner = object["owner"].as_str().expect("owner");
    assert!(owner.contains(&format!("/{pid}/")), "{object}");
}

fn elect_runs_cmd_with_term_and_passes_its_code(target: &Target) {
    let script = r#"printf '%s\n' "$DISTLOCK_TERM" "$DISTLOCK_TOKEN" "$DISTLOCK_KEY" "$DISTLOCK_OWNER" "$DISTLOCK_NAMESPACE"; exit 7"#;
    let out = output(target.distlock(&["elect", "e", "--value", "v", "--", "sh", "-c", script]));
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(term(lines[0]), term(lines[1]), "DISTLOCK_TERM is the token");
    assert_eq!(lines[2], "e");
    assert_eq!(lines[3].split('/').count(), 3, "owner {}", lines[3]);
    assert!(!lines[4].is_empty(), "no namespace");
    // Resigned on exit.
    assert_eq!(target.leader_json("e"), no_leader("e"));
}

fn second_candidate_leads_only_after_the_first_cmd_ended(target: &Target) {
    let log = target.scratch.path().join("log");
    let log = log.to_str().unwrap();
    let script = |who: &str| {
        format!(
            r#"echo {who}-start >> "$1"; echo "$DISTLOCK_TERM"; read x; echo {who}-end >> "$1""#
        )
    };
    let mut first = target.elect("e", &["--value", "a"], &script("A"), &[log]);
    let first_term = term(&first.line("the first leader's term"));
    let mut second = target.elect("e", &["--value", "b"], &script("B"), &[log]);
    // Let the second candidate campaign; it must not lead meanwhile.
    thread::sleep(Duration::from_millis(500));
    assert!(!second.has_line(), "the second candidate led too");
    first.proceed();
    assert_eq!(first.wait().code(), Some(0));
    let second_term = term(&second.line("the second leader's term"));
    second.proceed();
    assert_eq!(second.wait().code(), Some(0));
    assert_eq!(
        fs::read_to_string(log).unwrap(),
        "A-start\nA-end\nB-start\nB-end\n"
    );
    assert!(second_term > first_term, "{first_term} then {second_term}");
}

/// Checks that `line` starts with `start` and ends with `end`.
fn assert_framed(line: &str, start: &str, end: &str) {
    assert!(
        line.starts_with(start),
        "{line:?} does not start with {start:?}"
    );
    assert!(line.ends_with(end), "{line:?} does not end with {end:?}");
}

fn leader_and_status_show_the_leader_then_no_leader(target: &Target) {
    let mut leading = target.elect("e", &["--value", "host-a:80"], LEAD_UNTIL_TOLD, &[]);
    let term = term(&leading.line("the leader's term"));
    let pid = leading.child.id();

    let out = output(target.distlock(&["leader", "e"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert_framed(
        &text,
        "e: led by ",
        &format!(", term {term}, value \"host-a:80\"\n"),
    );
    assert!(text.contains(&format!("/{pid}/")), "{text}");
    assert_leader(&target.leader_json("e"), "e", "host-a:80", term, pid);

    let status = output(target.distlock(&["status", "e"]));
    assert!(
        stdout(&status).contains(&format!("token {term}, value \"host-a:80\"")),
        "{}",
        stdout(&status)
    );
    let status = output(target.distlock(&["status", "e", "--json"]));
    let status = json_line(stdout(&status).trim());
    assert_eq!(status["value"], "host-a:80", "{status}");
    assert_eq!(status["token"], term, "{status}");

    leading.proceed();
    assert_eq!(leading.line("CMD's end"), "finished");
    assert_eq!(leading.wait().code(), Some(0));
    let out = output(target.distlock(&["leader", "e"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "e: no leader\n");
    assert_eq!(target.leader_json("e"), no_leader("e"));
    let status = output(target.distlock(&["status", "e", "--json"]));
    assert_eq!(json_line(stdout(&status).trim())["value"], Value::Null);
}

fn leader_watch_prints_the_state_then_each_change(target: &Target) {
    let mut watch = Running::spawn(target.distlock(&["leader", "e", "--watch", "--json"]));
    assert_eq!(json_line(&watch.line("the initial state")), no_leader("e"));
    let mut leaders = Vec::new();
    for value in ["a", "b"] {
        let mut leading = target.elect("e", &["--value", value], LEAD_UNTIL_TOLD, &[]);
        let term = term(&leading.line("the leader's term"));
        let seen = json_line(&watch.line("the new leader"));
        assert_leader(&seen, "e", value, term, leading.child.id());
        leading.proceed();
        assert_eq!(leading.wait().code(), Some(0));
        assert_eq!(json_line(&watch.line("the resignation")), no_leader("e"));
        leaders.push(term);
    }
    assert!(leaders[0] < leaders[1], "{leaders:?}");
    watch.signal(libc::SIGINT);
    assert_eq!(
        watch.wait().code(),
        Some(0),
        "SIGINT ends the watch cleanly"
    );
    assert!(!watch.has_line());
    assert_eq!(watch.rest_of_stderr(), Vec::<String>::new());
}

fn on_lost_kill_stops_cmd_and_exits_76(target: &Target) {
    let script = r#"echo "$DISTLOCK_TERM"; exec sleep 30"#;
    let mut leading = target.elect("e", &["--grace", "5s"], script, &[]);
    leading.line("the leader's term");
    target.take_away("e");
    let taken_away = Instant::now();
    assert_eq!(leading.wait().code(), Some(76));
    // SIGTERM, not the SIGKILL that --grace would send after 5 s.
    assert!(
        taken_away.elapsed() < Duration::from_secs(4),
        "took {:?}",
        taken_away.elapsed()
    );
    let message = leading.err_line("the loss");
    assert_framed(
        &message,
        "distlock: leadership of \"e\" lost (",
        "); stopping sh and every process it started",
    );
}

fn on_lost_ignore_lets_cmd_finish_and_exits_76(target: &Target) {
    let mut leading = target.elect("e", &["--on-lost", "ignore"], LEAD_UNTIL_TOLD, &[]);
    leading.line("the leader's term");
    target.take_away("e");
    let warning = leading.err_line("the loss");
    assert_framed(
        &warning,
        "distlock: warning: leadership of \"e\" lost (",
        "sh keeps running (--on-lost ignore)",
    );
    leading.proceed();
    assert_eq!(leading.line("CMD's end"), "finished");
    assert_eq!(leading.wait().code(), Some(76));
}

fn run_value_shows_in_status(target: &Target) {
    let mut command = target.distlock(&["run", "k", "--value", "note: a b", "--"]);
    command.args(["sh", "-c", "echo held; read x"]);
    let mut holding = Running::spawn(command);
    assert_eq!(holding.line("the lock taken"), "held");
    let status = output(target.distlock(&["status", "k"]));
    assert!(
        stdout(&status).contains(", value \"note: a b\""),
        "{}",
        stdout(&status)
    );
    holding.proceed();
    assert_eq!(holding.wait().code(), Some(0));
}

/// The cases above as tests in module `$module`, on targets made by
/// `$target` (given the test's name), compiled with `$cfg`.
macro_rules! election_tests {
    ($module:ident, $target:expr, $($cfg:tt)*) => {
        election_tests!(@cases $module, $target, [$($cfg)*],
            elect_runs_cmd_with_term_and_passes_its_code("elect-env"),
            second_candidate_leads_only_after_the_first_cmd_ended("elect-two"),
            leader_and_status_show_the_leader_then_no_leader("leader"),
            leader_watch_prints_the_state_then_each_change("leader-watch"),
            on_lost_kill_stops_cmd_and_exits_76("elect-kill"),
            on_lost_ignore_lets_cmd_finish_and_exits_76("elect-ignore"),
            run_value_shows_in_status("run-value"),
        );
    };
    (@cases $module:ident, $target:expr, [$($cfg:tt)*], $($case:ident($test:literal),)*) => {
        #[cfg($($cfg)*)]
        mod $module {
            use super::*;

            $(
                #[test]
                fn $case() {
                    super::$case(&$target($test));
                }
            )*
        }
    };
}

election_tests!(on_file, Target::file, all());
election_tests!(
    on_redis,
    |test| Target::network(common::redis_url(test, "ttl=2s")),
    feature = "redis"
);
election_tests!(
    on_etcd,
    |test| Target::network(common::etcd_url(test, "ttl=2s")),
    feature = "etcd"
);
election_tests!(
    on_zookeeper,
    // A longer ttl: ZooKeeper's session timeout follows it, and a session
    // must open on a busy machine within 40% of that.
    |test| Target::network(common::zookeeper_url(test, "ttl=5s")),
    feature = "zookeeper"
);

#[test]
fn overlong_value_is_a_usage_error_naming_the_limit() {
    let target = Target::file("value-limit");
    let value = "x".repeat(distlock::MAX_VALUE_LEN + 1);
    for command in ["elect", "run"] {
        let out = output(target.distlock(&[command, "k", "--value", &value, "--", "true"]));
        assert_eq!(out.status.code(), Some(2), "{command}: {}", stderr(&out));
        assert_eq!(
            one_line_message(&out),
            "distlock: --value is 4097 bytes long; the limit is 4096 bytes"
        );
    }
    let longest = "x".repeat(distlock::MAX_VALUE_LEN);
    let out = output(target.distlock(&["elect", "k", "--value", &longest, "--", "true"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn bad_election_names_are_usage_errors() {
    let target = Target::file("bad-name");
    for args in [
        &["elect", "", "--", "true"][..],
        &["leader", ""],
        &["leader", "", "--watch"],
    ] {
        let out = output(target.distlock(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let message = one_line_message(&out);
        assert!(message.contains("key"), "{args:?}: {message}");
    }
}
