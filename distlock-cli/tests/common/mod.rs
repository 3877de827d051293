//! Helpers shared by the command's tests: a private file store per test,
//! running `distlock` with a time limit, reading its messages, and the
//! cross-process checks every store must pass (a counter no run loses an
//! increment of, fencing tokens that increase from run to run).

#![allow(dead_code, unreachable_pub)] // each test file uses a different part

pub mod running;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// No single `distlock` call in these tests should come near this.
pub const LIMIT: Duration = Duration::from_secs(30);
/// ... except `distlock check`: its cases run concurrently, the slowest
/// waiting out a ttl and slack, longer on a loaded machine.
pub const CHECK_LIMIT: Duration = Duration::from_secs(180);

/// A file lock store in a fresh temporary directory.
pub struct Store {
    pub dir: tempfile::TempDir,
    pub url: String,
}

impl Store {
    pub fn new() -> Self {
        Self::with_options("")
    }

    /// A store whose URL carries `query` (`?ttl=300ms`), if not empty.
    pub fn with_options(query: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("file://{}{query}", dir.path().display());
        Self { dir, url }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A scratch file next to (not inside) the lock files' reach.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("scratch-{name}"))
    }

    /// `distlock --url <this store> ARGS...`.
    pub fn distlock(&self, args: &[&str]) -> Command {
        distlock_at(&self.url, args)
    }

    /// Spawns `distlock run KEY -- sh -c SCRIPT` with output discarded,
    /// and waits until the script has created the file `ready`.
    pub fn hold(&self, key: &str, script: &str, ready: &Path) -> Child {
        self.hold_with(key, &[], script, ready)
    }

    /// [`hold`](Self::hold) with `run`'s `flags` (`--shared`).
    pub fn hold_with(&self, key: &str, flags: &[&str], script: &str, ready: &Path) -> Child {
        let mut args = vec!["run", key];
        args.extend_from_slice(flags);
        self.spawn_until_ready(&args, script, Stdio::null(), ready)
    }

    /// Spawns `distlock ARGS -- sh -c SCRIPT` with stdin and stdout
    /// discarded and stderr to `stderr`, and waits until the script has
    /// created the file `ready`.
    pub fn spawn_until_ready(
        &self,
        args: &[&str],
        script: &str,
        stderr: Stdio,
        ready: &Path,
    ) -> Child {
        let mut all = args.to_vec();
        all.extend(["--", "sh", "-c", script]);
        let child = self
            .distlock(&all)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn distlock");
        wait_for(|| ready.exists(), "the command to start");
        child
    }
}

/// The `distlock` binary under test, isolated from the caller's
/// environment.
pub fn distlock() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command
        .env_remove("DISTLOCK_URL")
        .env_remove("DISTLOCK_LOG");
    command
}

/// `distlock --url URL ARGS...`.
pub fn distlock_at(url: &str, args: &[&str]) -> Command {
    let mut command = distlock();
    command.arg("--url").arg(url).args(args);
    command
}

/// Runs `command` to completion within [`LIMIT`], capturing its output;
/// kills it and fails the test if it hangs.
pub fn output(command: Command) -> Output {
    output_within(command, LIMIT)
}

/// Runs `command` to completion within `limit`, capturing its output;
/// kills it and fails the test if it hangs.
pub fn output_within(mut command: Command, limit: Duration) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn distlock");
    let pid = child.id();
    let (done, waited) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match waited.recv_timeout(limit) {
        Ok(output) => output.expect("wait for distlock"),
        Err(_) => {
            signal(pid, libc::SIGKILL);
            panic!("distlock {command:?} did not finish within {limit:?}");
        }
    }
}

/// Waits for `child` within [`LIMIT`].
pub fn wait(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process {} did not exit within {LIMIT:?}", child.id());
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `condition` every 10 ms until it holds; fails after [`LIMIT`].
pub fn wait_for(mut condition: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + LIMIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `signal` to process `pid`.
pub fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts that stderr is exactly one `distlock: ` line and no panic, and
/// returns it.
pub fn one_line_message(output: &Output) -> String {
    let stderr = stderr(output);
    assert!(!stderr.contains("panicked"), "panic in stderr: {stderr}");
    assert!(
        !stderr.contains("RUST_BACKTRACE"),
        "backtrace hint in stderr: {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one line on stderr, got: {stderr:?}"
    );
    assert!(lines[0].starts_with("distlock: "), "{stderr:?}");
    lines[0].to_owned()
}

/// Asserts that the table `text` has a row starting with each of
/// `labels` (after its indent).
pub fn assert_rows(text: &str, labels: &[&str]) {
    for label in labels {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(label)),
            "no {label:?} row:\n{text}"
        );
    }
}

/// The read-modify-write that loses updates unless runs exclude each
/// other; the sleep widens the window. Also logs the fencing token. `$1`
/// is the counter file, `$2` the token log.
pub const INCREMENT: &str =
    r#"n=$(cat "$1"); sleep 0.002; echo $((n + 1)) > "$1"; echo "$DISTLOCK_TOKEN" >> "$2""#;

/// Runs `workers` threads, each doing `runs` successive
/// `distlock --url URL run KEY -- sh -c INCREMENT` on one counter file, and
/// asserts that no increment was lost and that the tokens the runs saw,
/// in the order they held the lock, strictly increase. Returns the tokens.
pub fn assert_concurrent_runs_never_lose_an_increment(
    url: &str,
    key: &str,
    workers: usize,
    runs: usize,
) -> Vec<u64> {
    let _turn = heavy_turn();
    let scratch = tempfile::tempdir().expect("temp dir");
    let counter = scratch.path().join("counter");
    let tokens = scratch.path().join("tokens");
    fs::write(&counter, "0\n").unwrap();
    let started = Instant::now();
    thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                for _ in 0..runs {
                    let mut run =
                        distlock_at(url, &["run", key, "--", "sh", "-c", INCREMENT, "sh"]);
                    run.arg(&counter).arg(&tokens);
                    let out = output(run);
                    assert!(out.status.success(), "run failed: {}", stderr(&out));
                }
            });
        }
    });
    let total = fs::read_to_string(&counter).unwrap();
    assert_eq!(
        total.trim(),
        (workers * runs).to_string(),
        "lost increments"
    );
    let tokens: Vec<u64> = fs::read_to_string(&tokens)
        .unwrap()
        .lines()
        .map(|t| t.parse().expect("numeric token"))
        .collect();
    assert_eq!(tokens.len(), workers * runs);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not increasing: {tokens:?}"
    );
    eprintln!("{} runs in {:?}", tokens.len(), started.elapsed());
    tokens
}

/// Runs `distlock --url URL run KEY -- sh -c 'echo $DISTLOCK_TOKEN'` `runs`
/// times, one after another, and asserts that each run saw a greater
/// token than the one before. Returns the tokens.
pub fn assert_successive_tokens_increase(url: &str, key: &str, runs: usize) -> Vec<u64> {
    let tokens: Vec<u64> = (0..runs)
        .map(|_| {
            let out = output(distlock_at(
                url,
                &["run", key, "--", "sh", "-c", "echo $DISTLOCK_TOKEN"],
            ));
            assert!(out.status.success(), "{}", stderr(&out));
            stdout(&out).trim().parse().expect("numeric token")
        })
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    tokens
}

/// Checks that `text` contains each of `parts`.
pub fn assert_mentions_each(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} missing in:\n{text}");
    }
}

/// Runs `distlock --url URL check` and asserts that it exits 0, that it
/// ran on `backend`, that every case passed or was not applicable, and
/// that no panic reached stderr. Returns its stdout.
///
/// One heavy run (a `check`, or concurrent `run`s) at a time in a test
/// binary: a `check` runs up to 40 lockers side by side, and several at
/// once on a two-core machine can stall a process past its 3 s leases,
/// which the store then rightly reports lost; a `check` beside 8
/// concurrent `run`s on one PostgreSQL server passes its default 100
/// connections.
fn heavy_turn() -> std::sync::MutexGuard<'static, ()> {
    static ONE_HEAVY_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_HEAVY_RUN_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `distlock check` on `url` (one heavy run at a time, see
/// [`heavy_turn`]) and asserts it passed.
pub fn assert_check_passes(url: &str, backend: &str) -> String {
    let _turn = heavy_turn();
    assert_check_passed(
        &output_within(distlock_at(url, &["check"]), CHECK_LIMIT),
        backend,
    )
}

/// [`assert_check_passes`] for the output `out` of a `check` already run.
pub fn assert_check_passed(out: &Output, backend: &str) -> String {
    let text = stdout(out);
    assert!(
        out.status.success(),
        "check failed:\n{text}\n{}",
        stderr(out)
    );
    let header = text.lines().next().expect("a header line");
    assert!(
        header.starts_with("checking ") && header.contains(&format!(" ({backend} backend): ")),
        "{header}"
    );
    let summary = text.lines().last().expect("a summary line");
    assert!(summary.starts_with("check: "), "{summary}");
    assert!(summary.contains(" passed, 0 failed, "), "{summary}");
    assert!(summary.ends_with(" not applicable"), "{summary}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("ok    mutual_exclusion (")),
        "{text}"
    );
    assert!(!stderr(out).contains("panicked"), "{}", stderr(out));
    text
}

/// What a testkit server function gives: awaits `start` on a runtime of
/// its own (the servers outlive it, kept by the testkit for the process)
/// and fails the test with the testkit's message (what to install) if the
/// server cannot be had.
pub fn test_server<T>(start: impl std::future::Future<Output = Result<T, String>>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(start)
        .unwrap_or_else(|error| panic!("test server unavailable: {error}"))
}

/// `namespace=…` unique to this test and this run, plus `options`.
pub fn unique_options(test: &str, options: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let namespace = format!("cli-{test}-{}-{nanos:x}", std::process::id());
    if options.is_empty() {
        format!("namespace={namespace}")
    } else {
        format!("namespace={namespace}&{options}")
    }
}

/// The testkit's Redis server, in a namespace of this test's own, plus
/// `extra` options.
#[cfg(feature = "redis")]
pub fn redis_url(test: &str, extra: &str) -> String {
    let base = test_server(distlock_testkit::redis::shared_redis_url());
    distlock_testkit::with_query(&base, &unique_options(test, extra))
}

/// The testkit's etcd server, in a namespace of this test's own, plus
/// `extra` options.
#[cfg(feature = "etcd")]
pub fn etcd_url(test: &str, extra: &str) -> String {
    let base = test_server(distlock_testkit::etcd::shared_etcd_url());
    distlock_testkit::with_query(&base, &unique_options(test, extra))
}

/// The testkit's PostgreSQL server (or `DISTLOCK_TEST_PG_URL`'s), in a
/// namespace and a schema (`schema=cli_…`) of this test's own, plus
/// `extra` options.
#[cfg(feature = "postgres")]
pub fn postgres_url(test: &str, extra: &str) -> String {
    let base = test_server(distlock_testkit::postgres::shared_postgres_url());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let schema = format!("cli_{test}_{}_{nanos:x}", std::process::id());
    let options = unique_options(test, &format!("schema={schema}"));
    let options = if extra.is_empty() {
        options
    } else {
        format!("{options}&{extra}")
    };
    distlock_testkit::with_query(&base, &options)
}

/// The testkit's ZooKeeper server, in a namespace of this test's own, plus
/// `extra` options.
#[cfg(feature = "zookeeper")]
pub fn zookeeper_url(test: &str, extra: &str) -> String {
    let addrs = test_server(distlock_testkit::zookeeper::shared_standalone());
    distlock_testkit::zookeeper::zk_url(&addrs, "", &unique_options(test, extra))
}
