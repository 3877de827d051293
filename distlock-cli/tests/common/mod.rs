//! Helpers shared by the command's tests: a private file store per test,
//! running `distlock` with a time limit, and reading its messages.

#![allow(dead_code, unreachable_pub)] // each test file uses a different part

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// No single `distlock` call in these tests should come near this.
pub const LIMIT: Duration = Duration::from_secs(30);

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
        let mut command = distlock();
        command.arg("--url").arg(&self.url).args(args);
        command
    }

    /// Spawns `distlock run KEY -- sh -c SCRIPT` with output discarded,
    /// and waits until the script has created the file `ready`.
    pub fn hold(&self, key: &str, script: &str, ready: &Path) -> Child {
        let child = self
            .distlock(&["run", key, "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn holder");
        wait_for(|| ready.exists(), "the holder's command to start");
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

/// Runs `command` to completion within [`LIMIT`], capturing its output;
/// kills it and fails the test if it hangs.
pub fn output(mut command: Command) -> Output {
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
    match waited.recv_timeout(LIMIT) {
        Ok(output) => output.expect("wait for distlock"),
        Err(_) => {
            signal(pid, libc::SIGKILL);
            panic!("distlock {command:?} did not finish within {LIMIT:?}");
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
