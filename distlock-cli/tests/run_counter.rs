//! `distlock run` across real processes on the file backend: the lock
//! excludes, survives nothing it should not, and passes codes, tokens,
//! environment and signals through.

mod common;

use std::fs;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{one_line_message, output, signal, stderr, stdout, wait, wait_for, Store};

const WORKERS: usize = 8;
const RUNS_PER_WORKER: usize = 25;

#[test]
fn concurrent_runs_never_lose_an_increment() {
    let store = Store::new();
    common::assert_concurrent_runs_never_lose_an_increment(
        &store.url,
        "counter-key",
        WORKERS,
        RUNS_PER_WORKER,
    );
}

#[test]
fn tokens_seen_by_successive_runs_increase() {
    let store = Store::new();
    common::assert_successive_tokens_increase(&store.url, "k", 5);
}

/// Holds KEY with a CMD that sleeps 30 s (see [`Store::hold`]).
fn hold_sleeping(store: &Store, key: &str) -> Child {
    let ready = store.scratch(&format!("ready-{key}"));
    let script = format!("touch {}; exec sleep 30", ready.display());
    store.hold(key, &script, &ready)
}

/// Holds KEY with a CMD that writes its pid, then becomes `sleep 30`;
/// returns the holding `distlock` and CMD's pid.
fn hold_reporting_cmd_pid(store: &Store, key: &str) -> (Child, u32) {
    let pid_file = store.scratch("cmd-pid");
    // `exec` keeps the pid written by the shell as CMD's pid.
    let script = format!(
        "echo $$ > {0}.tmp && mv {0}.tmp {0} && exec sleep 30",
        pid_file.display()
    );
    let holder = store.hold(key, &script, &pid_file);
    let cmd_pid = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (holder, cmd_pid)
}

#[test]
fn sigkilled_holder_frees_the_lock() {
    let store = Store::new();
    let (mut holder, cmd_pid) = hold_reporting_cmd_pid(&store, "k");
    holder.kill().unwrap(); // SIGKILL: no chance to release
    signal(cmd_pid, libc::SIGKILL);
    wait(&mut holder);

    let started = Instant::now();
    let out = output(store.distlock(&["run", "k", "--wait", "5s", "--", "true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

#[cfg(target_os = "linux")]
#[test]
fn cmd_does_not_inherit_the_lock_file() {
    // If CMD inherited the lock's descriptor, a SIGKILLed distlock would
    // leave its lock held by an orphaned CMD.
    let store = Store::new();
    let out = output(store.distlock(&["run", "k", "--", "sh", "-c", "ls -l /proc/$$/fd/"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let fds = stdout(&out);
    assert!(
        !fds.contains(&store.path().display().to_string()),
        "CMD holds a lock file:\n{fds}"
    );
}

#[test]
fn wait_timeout_exits_75_naming_the_holder() {
    let store = Store::new();
    let mut holder = hold_sleeping(&store, "busy");

    let started = Instant::now();
    let out = output(store.distlock(&["run", "busy", "--wait", "300ms", "--", "true"]));
    let waited = started.elapsed();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let message = one_line_message(&out);
    assert!(
        message.starts_with("distlock: lock \"busy\" is held by "),
        "{message}"
    );
    assert!(message.contains(&format!("/{}/", holder.id())), "{message}");
    assert!(message.ends_with("gave up after 300ms"), "{message}");
    assert!(
        waited >= Duration::from_millis(300),
        "gave up early: {waited:?}"
    );

    let once = output(store.distlock(&["run", "busy", "--wait", "0", "--", "true"]));
    assert_eq!(once.status.code(), Some(75));

    signal(holder.id(), libc::SIGTERM);
    wait(&mut holder);
}

#[test]
fn exit_code_of_cmd_is_passed_through() {
    let store = Store::new();
    let out = output(store.distlock(&["run", "k", "--", "sh", "-c", "exit 7"]));
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(stderr(&out), "");
    let killed = output(store.distlock(&["run", "k", "--", "sh", "-c", "kill -KILL $$"]));
    assert_eq!(killed.status.code(), Some(128 + libc::SIGKILL));
}

#[test]
fn cmd_sees_the_lock_in_its_environment() {
    let store = Store::with_options("?namespace=jobs");
    let script = r#"printf '%s\n' "$DISTLOCK_KEY" "$DISTLOCK_TOKEN" "$DISTLOCK_OWNER" "$DISTLOCK_NAMESPACE""#;
    let child = store
        .distlock(&["run", "reports/daily", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0], "reports/daily");
    assert!(lines[1].parse::<u64>().is_ok(), "token {}", lines[1]);
    let owner: Vec<&str> = lines[2].split('/').collect();
    assert_eq!(owner.len(), 3, "owner {}", lines[2]);
    assert_eq!(owner[1], pid.to_string(), "owner names distlock's pid");
    assert_eq!(lines[3], "jobs");
}

#[test]
fn signals_are_forwarded_to_cmd_and_the_lock_released() {
    let store = Store::new();
    for (number, name) in [
        (libc::SIGTERM, "TERM"),
        (libc::SIGINT, "INT"),
        (libc::SIGHUP, "HUP"),
    ] {
        let ready = store.scratch(&format!("ready-{name}"));
        let marker = store.scratch(&format!("got-{name}"));
        // The trap proves CMD got the signal; `wait` lets the shell run it
        // at once; the sleep is killed so nothing outlives the test.
        let script = format!(
            "trap 'echo {name} > {marker}; kill $pid; exit 3' {name}; \
             sleep 30 & pid=$!; touch {ready}; wait $pid",
            marker = marker.display(),
            ready = ready.display()
        );
        let mut holder = store.hold("k", &script, &ready);
        signal(holder.id(), number);
        let status = wait(&mut holder);
        assert_eq!(
            status.code(),
            Some(3),
            "SIG{name}: distlock exits with CMD's code"
        );
        assert_eq!(fs::read_to_string(&marker).unwrap().trim(), name);
        let free = output(store.distlock(&["run", "k", "--wait", "0", "--", "true"]));
        assert!(
            free.status.success(),
            "SIG{name}: lock not released: {}",
            stderr(&free)
        );
    }
}

#[test]
fn command_that_cannot_run_exits_127_and_releases() {
    let store = Store::new();
    let out = output(store.distlock(&["run", "k", "--", "/nonexistent/command"]));
    assert_eq!(out.status.code(), Some(127));
    let message = one_line_message(&out);
    assert!(
        message.starts_with("distlock: cannot run /nonexistent/command: "),
        "{message}"
    );
    let free = output(store.distlock(&["run", "k", "--wait", "0", "--", "true"]));
    assert!(free.status.success(), "{}", stderr(&free));
}

/// Starts `distlock run k FLAGS -- sh -c 'touch READY; THEN'` on a store
/// with a 300 ms ttl, waits for CMD to start, then removes every lock file
/// of the store: the file backend reports such locks lost (its check runs
/// at ttl/3).
fn run_then_lose_the_lock(flags: &[&str], then: &str, stderr: Stdio) -> (Store, Child) {
    let store = Store::with_options("?ttl=300ms");
    let ready = store.scratch("ready");
    let script = format!("touch {}; {then}", ready.display());
    let mut args = vec!["run", "k"];
    args.extend_from_slice(flags);
    args.extend(["--", "sh", "-c", &script]);
    let holder = store.distlock(&args).stderr(stderr).spawn().unwrap();
    wait_for(|| ready.exists(), "CMD to start");
    for entry in fs::read_dir(store.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            fs::remove_dir_all(&path).unwrap();
        }
    }
    (store, holder)
}

#[test]
fn lost_lock_stops_cmd_and_exits_76() {
    let (_store, mut holder) =
        run_then_lose_the_lock(&["--grace", "5s"], "exec sleep 30", Stdio::piped());
    let started = Instant::now();
    let status = wait(&mut holder);
    assert_eq!(status.code(), Some(76));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let mut message = String::new();
    std::io::Read::read_to_string(&mut holder.stderr.take().unwrap(), &mut message).unwrap();
    assert!(
        message.starts_with("distlock: lock \"k\" lost ("),
        "{message}"
    );
    assert!(
        message
            .trim_end()
            .ends_with("); stopping sh and every process it started"),
        "{message}"
    );
}

#[test]
fn lost_lock_with_on_lost_ignore_keeps_cmds_code() {
    let (_store, mut holder) =
        run_then_lose_the_lock(&["--on-lost", "ignore"], "sleep 1; exit 4", Stdio::null());
    assert_eq!(wait(&mut holder).code(), Some(4));
}

#[test]
fn signal_while_waiting_for_the_lock_gives_up_cleanly() {
    let store = Store::new();
    let mut holder = hold_sleeping(&store, "k");
    let mut waiter = store
        .distlock(&["run", "k", "--", "sh", "-c", "echo ran"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let it start waiting (its signal handlers are in place by then).
    thread::sleep(Duration::from_millis(500));
    signal(waiter.id(), libc::SIGINT);
    let status = wait(&mut waiter);
    assert_eq!(status.code(), Some(128 + libc::SIGINT));
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(stdout(&out), "", "CMD must not run");
    assert_eq!(
        stderr(&out).trim_end(),
        "distlock: SIGINT received while waiting for lock \"k\""
    );
    signal(holder.id(), libc::SIGTERM);
    wait(&mut holder);
}

#[cfg(target_os = "linux")]
#[test]
fn cmd_does_not_outlive_a_sigkilled_distlock() {
    let store = Store::new();
    let (mut holder, cmd_pid) = hold_reporting_cmd_pid(&store, "k");
    holder.kill().unwrap(); // only distlock; the kernel must take CMD along
    wait(&mut holder);
    // Gone, or a zombie waiting for a PID 1 that does not reap.
    wait_for(
        || match fs::read_to_string(format!("/proc/{cmd_pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        },
        "CMD to die with distlock",
    );
}
