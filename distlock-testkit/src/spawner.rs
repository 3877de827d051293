//! One never-exiting thread that forks every child process.
//!
//! Children must not outlive the test process, even when they belong to a
//! server kept in a `static` (statics are never dropped). Each child asks
//! the kernel for `SIGKILL` when its parent dies (`PR_SET_PDEATHSIG`). But
//! "parent" there means the *thread* that forked it: tokio's worker and
//! blocking-pool threads exit (the runtime of each `#[tokio::test]` ends
//! with the test, idle blocking threads after 10 s), and a child forked by
//! one of them would be killed at that moment. So every fork happens on the
//! one thread started here, which lives as long as the process.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::OnceLock;

use tokio::sync::oneshot;

/// A command to fork, and where to send the child.
struct Request {
    command: Command,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// A command running test `test` of this test binary alone (ignored or
/// not), its output not captured: for a helper process, a test that
/// does its part (hold a lock, say) when an environment variable the
/// caller sets tells it to. Spawn it with [`spawn_child`] or turn it into
/// a `tokio::process::Command`.
///
/// # Panics
///
/// If the path of this test binary cannot be found.
pub fn this_binary_running(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("this test binary's path"));
    // Not `--test-threads=1`: on one thread the harness prints the test's
    // name without a newline before the test runs, so the test's first
    // line would not start a line of its own.
    command.args(["--exact", test, "--include-ignored", "--nocapture"]);
    command
}

/// Spawns `command` on the spawner thread and returns the running child.
///
/// On top of what `command` sets, the child gets its own process group
/// (`process_group(0)`, so signals to `-pid` reach everything it starts)
/// and `PR_SET_PDEATHSIG = SIGKILL`, so the kernel kills it when this test
/// process dies for any reason. Grandchildren do not inherit the death
/// signal: prefer launching the real binary over a wrapper script that
/// forks it.
///
/// The result is a `std::process::Child`; its pipes can be turned into
/// tokio ones with e.g. `tokio::process::ChildStdout::from_std`.
pub async fn spawn_child(command: Command) -> io::Result<Child> {
    let (reply, result) = oneshot::channel();
    spawner()
        .send(Request { command, reply })
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    result
        .await
        .map_err(|_| io::Error::other("the spawner thread dropped the request"))?
}

/// Blocking variant of [`spawn_child`] for code outside an async context
/// (it panics if called on a tokio runtime thread).
pub fn spawn_child_blocking(command: Command) -> io::Result<Child> {
    let (reply, result) = oneshot::channel();
    spawner()
        .send(Request { command, reply })
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    result
        .blocking_recv()
        .map_err(|_| io::Error::other("the spawner thread dropped the request"))?
}

/// The channel to the spawner thread, starting the thread on first use.
fn spawner() -> &'static mpsc::Sender<Request> {
    static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("distlock-test-spawner".into())
            .spawn(move || serve(rx))
            .expect("start the child-spawner thread");
        tx
    })
}

/// The spawner thread's loop. The sender lives in a static, so `rx` never
/// closes and the thread never exits.
fn serve(rx: mpsc::Receiver<Request>) {
    for Request { mut command, reply } in rx {
        let result = spawn_here(&mut command);
        if let Err(Ok(mut orphan)) = reply.send(result) {
            // The caller went away (its future was dropped): nobody would
            // ever kill this child, so do it now.
            kill_group(&orphan);
            let _ = orphan.wait();
        }
    }
}

/// Forks `command` on the current thread with its own process group and a
/// parent-death signal.
fn spawn_here(command: &mut Command) -> io::Result<Child> {
    // Read in the parent, before the fork, so the child can compare.
    let parent = std::process::id();
    command.process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only
    // makes async-signal-safe system calls (prctl, getppid); it does not
    // allocate or take locks.
    unsafe {
        command.pre_exec(move || {
            let sig = libc::SIGKILL as libc::c_ulong;
            if libc::prctl(libc::PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // If the parent died between fork and prctl, the signal was
            // never sent and the child was re-parented: give up now.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Sends `SIGKILL` to the process group led by `child`.
fn kill_group(child: &Child) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
}
