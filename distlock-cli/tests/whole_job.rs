//! `run` and `elect` treat CMD and everything it starts as one job: a
//! loss or a signal to distlock stops all of it (SIGTERM, then SIGKILL
//! after --grace), a daemon CMD leaves behind keeps the lock until it
//! ends, and none of the job outlives the lock. Linux: distlock is the
//! child subreaper of the job, so processes that leave CMD's process
//! group are caught too.
#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{output, signal, stderr, wait, wait_for, Store};

/// Whether `pid` names a process that has not been reaped (zombies count:
/// a zombie of the job means distlock did not wait for it).
fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn read_pid(path: &Path) -> u32 {
    wait_for(
        || fs::read_to_string(path).is_ok_and(|t| t.ends_with('\n')),
        "a pid file",
    );
    fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

/// The script of a job with a grandchild in CMD's process group and a
/// daemon that left it with `setsid`; both pids are written to
/// `scratch-child` and `scratch-daemon`, then `scratch-ready` appears.
/// `prelude` runs first (a `trap`, say).
fn job_script(store: &Store, prelude: &str) -> String {
    format!(
        "{prelude} sleep 300 & echo $! > {child}; setsid sleep 301 & echo $! > {daemon}; \
         touch {ready}; wait",
        child = store.scratch("child").display(),
        daemon = store.scratch("daemon").display(),
        ready = store.scratch("ready").display(),
    )
}

/// Spawns `distlock ARGS -- sh -c SCRIPT` and waits until the script is
/// ready; returns distlock and the two pids of [`job_script`].
fn start(store: &Store, args: &[&str], script: &str) -> (Child, u32, u32) {
    let ready = store.scratch("ready");
    let holder = store.spawn_until_ready(args, script, Stdio::piped(), &ready);
    let child = read_pid(&store.scratch("child"));
    let daemon = read_pid(&store.scratch("daemon"));
    assert!(exists(child) && exists(daemon));
    (holder, child, daemon)
}

/// Removes every lock directory of the store: the file store reports its
/// locks lost at its next check (ttl/3).
fn lose_every_lock(store: &Store) {
    for entry in fs::read_dir(store.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            fs::remove_dir_all(&path).unwrap();
        }
    }
}

fn stderr_of(holder: Child) -> String {
    stderr(&holder.wait_with_output().unwrap())
}

fn lock_is_free(store: &Store, key: &str) -> bool {
    output(store.distlock(&["run", key, "--wait", "0", "--", "true"]))
        .status
        .success()
}

/// What became of a job whose lock was lost.
struct LostJob {
    /// From the loss to distlock's exit.
    took: Duration,
    /// The pids of [`job_script`]'s grandchild and daemon.
    child: u32,
    daemon: u32,
    /// distlock's stderr.
    message: String,
}

/// Starts `distlock ARGS -- <job>` on a store with a 300 ms ttl, the job
/// [`job_script`]'s (`prelude` first), loses every lock, and checks that
/// distlock exits 76 (lost).
fn lose_the_lock_of_a_job(args: &[&str], prelude: &str) -> LostJob {
    let store = Store::with_options("?ttl=300ms");
    let script = job_script(&store, prelude);
    let (mut holder, child, daemon) = start(&store, args, &script);
    let lost_at = Instant::now();
    lose_every_lock(&store);
    assert_eq!(wait(&mut holder).code(), Some(76));
    let took = lost_at.elapsed();
    LostJob {
        took,
        child,
        daemon,
        message: stderr_of(holder),
    }
}

#[test]
fn a_lost_lock_stops_every_process_of_the_job() {
    let job = lose_the_lock_of_a_job(&["run", "k", "--grace", "5s"], "");
    assert!(!exists(job.child), "CMD's child outlived the lock");
    assert!(
        !exists(job.daemon),
        "the daemon that left CMD's group outlived the lock"
    );
    assert!(
        job.message
            .contains("stopping sh and every process it started"),
        "{}",
        job.message
    );
}

#[test]
fn a_process_that_ignores_sigterm_is_killed_after_the_grace_period() {
    // `trap "" TERM` makes the shell and what it starts ignore SIGTERM.
    let job = lose_the_lock_of_a_job(&["run", "k", "--grace", "1s"], "trap '' TERM;");
    assert!(
        job.took >= Duration::from_secs(1),
        "SIGKILL came before the grace period ended"
    );
    assert!(
        !exists(job.child) && !exists(job.daemon),
        "the job outlived the lock"
    );
    assert!(
        job.message
            .contains("still running 1s after being told to stop; sending SIGKILL"),
        "{}",
        job.message
    );
}

#[test]
fn sigterm_to_distlock_stops_the_whole_job_before_the_release() {
    let store = Store::new();
    let script = job_script(&store, "");
    let (mut holder, child, daemon) = start(&store, &["run", "k", "--grace", "5s"], &script);
    signal(holder.id(), libc::SIGTERM);
    // sh dies of the SIGTERM passed on to it; distlock exits with its code.
    assert_eq!(wait(&mut holder).code(), Some(128 + libc::SIGTERM));
    assert!(
        !exists(child) && !exists(daemon),
        "the job outlived the lock"
    );
    assert!(lock_is_free(&store, "k"), "the lock was not released");
}

#[test]
fn elect_stops_the_whole_job_when_the_leadership_is_lost() {
    let job = lose_the_lock_of_a_job(&["elect", "e", "--grace", "5s"], "");
    assert!(
        !exists(job.child) && !exists(job.daemon),
        "the job outlived the leadership"
    );
}

#[test]
fn a_daemon_left_by_cmd_keeps_the_lock_until_it_ends() {
    let store = Store::new();
    let script = format!(
        "echo $$ > {shell}; setsid sleep 300 & echo $! > {daemon}",
        shell = store.scratch("shell").display(),
        daemon = store.scratch("daemon").display(),
    );
    let holder = store
        .distlock(&["run", "k", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let shell = read_pid(&store.scratch("shell"));
    let daemon = read_pid(&store.scratch("daemon"));
    wait_for(|| !exists(shell), "CMD to exit and be reaped");
    assert!(
        !lock_is_free(&store, "k"),
        "released while CMD's daemon runs"
    );
    signal(daemon, libc::SIGTERM);
    let out = holder.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!exists(daemon));
    assert!(
        lock_is_free(&store, "k"),
        "not released after the daemon ended"
    );
    let message = stderr(&out);
    assert!(
        message.contains("sh exited with code 0 but left 1 process (")
            && message.contains("lock \"k\" is kept until they end"),
        "{message}"
    );
}

/// `script(1)` runs distlock on a pseudo-terminal, in its foreground.
fn on_a_terminal(store: &Store, cmd: &str) -> Command {
    let line = format!(
        "{} --url {} run k -- sh -c '{cmd}'",
        env!("CARGO_BIN_EXE_distlock"),
        store.url
    );
    let mut command = Command::new("script");
    command
        .args(["-qec", &line, "/dev/null"])
        .env_remove("DISTLOCK_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

#[test]
fn cmd_owns_the_terminal_and_ctrl_c_stops_its_whole_job() {
    use std::io::Write;
    let store = Store::new();
    let child_pid = store.scratch("child");
    // CMD reads a line from the terminal (in the background it would be
    // stopped by SIGTTIN), then waits on a child that ignores SIGINT (as
    // background jobs of scripts do) and says so once it does.
    let cmd = format!(
        "read line; echo got $line; sh -c \"trap \\\"\\\" INT; echo \\$\\$ > {}; exec sleep 300\" & wait",
        child_pid.display()
    );
    let mut terminal = on_a_terminal(&store, &cmd)
        .spawn()
        .expect("script(1) from util-linux");
    let mut input = terminal.stdin.take().unwrap();
    input.write_all(b"hello\n").unwrap();
    let child = read_pid(&child_pid);
    input.write_all(&[0x03]).unwrap(); // Ctrl-C
    input.flush().unwrap();
    assert_eq!(wait(&mut terminal).code(), Some(128 + libc::SIGINT));
    drop(input);
    let out = terminal.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("got hello"),
        "CMD could not read the terminal: {text}"
    );
    assert!(
        text.contains("sh was killed by SIGINT; stopping the 1 process"),
        "{text}"
    );
    assert!(!exists(child), "CMD's child outlived the lock");
    assert!(lock_is_free(&store, "k"));
}

/// Lines in `path` (0 while it does not exist).
fn lines_in(path: &Path) -> usize {
    fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

#[test]
fn a_job_stopped_past_its_lease_is_not_continued_but_stopped() {
    use std::io::Write;
    let store = Store::new();
    let ticks = store.scratch("ticks");
    // An interactive shell with job control, on a pseudo-terminal.
    let mut shell = Command::new("script")
        .args(["-qc", "bash --norc --noprofile -i", "/dev/null"])
        .env_remove("DISTLOCK_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script(1) from util-linux");
    let mut input = shell.stdin.take().unwrap();
    let cmd = format!(
        "{} --url 'mem://stopped?ttl=1s' run k -- sh -c 'while :; do echo tick >> {}; sleep 0.02; done'\n",
        env!("CARGO_BIN_EXE_distlock"),
        ticks.display(),
    );
    input.write_all(cmd.as_bytes()).unwrap();
    wait_for(|| lines_in(&ticks) >= 3, "the job to tick");
    input.write_all(&[0x1a]).unwrap(); // Ctrl-Z
    input.flush().unwrap();
    // Stopped: the ticks stop coming.
    let mut seen = lines_in(&ticks);
    wait_for(
        || {
            std::thread::sleep(Duration::from_millis(300));
            let now = lines_in(&ticks);
            std::mem::replace(&mut seen, now) == now
        },
        "the job to stop",
    );
    // Past the lease (1 s) while stopped, then continued.
    std::thread::sleep(Duration::from_secs(2));
    let exit = store.scratch("exit");
    let fg = format!("fg; echo \"exit $?\" > {}\n", exit.display());
    input.write_all(fg.as_bytes()).unwrap();
    wait_for(|| exit.exists(), "distlock to end after fg");
    assert_eq!(fs::read_to_string(&exit).unwrap().trim(), "exit 76");
    assert_eq!(
        lines_in(&ticks),
        seen,
        "the job ran on after its lease was gone"
    );
    input.write_all(b"exit\n").unwrap();
    drop(input);
    wait(&mut shell);
}
