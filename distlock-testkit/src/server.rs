//! A running test server: start, readiness, signals, restart, cleanup.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tempfile::TempDir;
use tokio::time::{sleep, timeout, Instant};

use crate::procfs::{self, PortOwner};
use crate::server_log::{failure_lines, last_lines, mentions_port_in_use, read_end, read_tail};
use crate::spec::{ServerContext, ServerSpec};
use crate::{cleanup, data_root, ports, signals, spawner};

/// How many times a start is tried with fresh ports when the server could
/// not bind because another process took a port in the meantime.
const PORT_ATTEMPTS: usize = 3;
/// Lines of the server log quoted in a readiness error.
const LOG_LINES_IN_ERRORS: usize = 20;
/// Upper bound for one readiness probe try, so a hung probe is retried.
const PROBE_TRY_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between readiness probe tries.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// How often [`Server::terminate`] checks whether the server exited.
const EXIT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A server process started from a [`ServerSpec`].
///
/// It runs in its own process group; every signal goes to the whole group.
/// Its stdout and stderr go to `server.log` in its temp dir, next to the
/// data dir. Dropping it kills the group with `SIGKILL`, reaps the process
/// and removes the temp dir. Methods take `&self` so a server shared
/// through a `static` (see [`crate::shared_server`]) can be used
/// fully.
#[derive(Debug)]
pub struct Server {
    /// Key of this server in the exit-time cleanup registry.
    id: u64,
    spec: ServerSpec,
    ctx: ServerContext,
    log_path: PathBuf,
    /// The running child; `None` after [`Server::stop`].
    child: Mutex<Option<Child>>,
    /// Holds the log and the data dir; removed on drop (declared last so
    /// the child is killed first).
    dir: TempDir,
}

/// Why a launch failed, and whether fresh ports may help.
struct LaunchError {
    message: String,
    port_in_use: bool,
}

impl ServerSpec {
    /// Starts the server on fresh free ports and waits until it is ready;
    /// see [`Server::start`].
    pub async fn start(self) -> Result<Server, String> {
        Server::start(self).await
    }
}

impl Server {
    /// Starts a server from `spec` on fresh free ports, with a fresh data
    /// dir, and waits until its readiness probe passes.
    ///
    /// If it exits or does not get ready within the spec's readiness
    /// timeout, the error names the program and port and quotes the last
    /// lines of its log. If a port was taken by another process meanwhile
    /// (the log says "address already in use", or the probe was answered
    /// by a listener outside the server's process group), the start is
    /// tried again with fresh ports (up to 3 tries in all).
    pub async fn start(spec: ServerSpec) -> Result<Server, String> {
        let mut attempt = 1;
        loop {
            let server = Self::prepare(spec.clone())
                .map_err(|e| format!("{}: cannot prepare a start: {e}", spec.name))?;
            server.initialize().await?;
            match server.launch().await {
                Ok(()) => return Ok(server),
                Err(e) if e.port_in_use && attempt < PORT_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e.message),
            }
        }
    }

    /// Reserves ports and creates the temp dir, without starting anything.
    fn prepare(spec: ServerSpec) -> io::Result<Server> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let ports = ports::free_ports(spec.port_count)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("distlock-test-{}-", spec.name))
            .tempdir_in(data_root::data_root())?;
        cleanup::track_dir(id, dir.path().to_owned());
        let data_dir = dir.path().join("data");
        std::fs::create_dir(&data_dir)?;
        if let Some(user) = spec.run_as {
            for path in [dir.path(), &data_dir] {
                std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))?;
            }
        }
        let ctx = ServerContext {
            port: ports[0],
            ports,
            data_dir,
        };
        Ok(Server {
            id,
            log_path: dir.path().join("server.log"),
            spec,
            ctx,
            child: Mutex::new(None),
            dir,
        })
    }

    /// Runs the spec's init step, if any, on the fresh data dir.
    async fn initialize(&self) -> Result<(), String> {
        let Some(init) = &self.spec.init else {
            return Ok(());
        };
        init(&self.ctx).await.map_err(|e| {
            format!(
                "test server {:?}: preparing {} failed: {e}",
                self.spec.name,
                self.ctx.data_dir.display()
            )
        })
    }

    /// Spawns the process (on the spawner thread) and waits until ready.
    /// On failure the process is killed.
    async fn launch(&self) -> Result<(), LaunchError> {
        let command = self
            .command()
            .map_err(|e| self.launch_error(&e.to_string()))?;
        let child = spawner::spawn_child(command)
            .await
            .map_err(|e| self.launch_error(&format!("cannot run it: {e}")))?;
        cleanup::track_group(self.id, Some(child.id()));
        *self.lock_child() = Some(child);
        let ready = self.wait_ready().await;
        if ready.is_err() {
            self.stop();
        }
        ready
    }

    /// The command for one launch, its output appended to the log.
    fn command(&self) -> io::Result<Command> {
        let args = (self.spec.args)(&self.ctx);
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)?;
        // A marker line separates the output of successive launches.
        writeln!(
            log,
            "=== harness: {} {args:?} ===",
            self.spec.program.display()
        )?;
        let mut command = Command::new(&self.spec.program);
        command
            .args(args)
            .envs(self.spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.ctx.data_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(user) = self.spec.run_as {
            // Applied in the child before the spawner's pre-exec step, so
            // the parent-death signal it sets survives the change of user.
            command.uid(user.uid).gid(user.gid);
        }
        Ok(command)
    }

    /// Retries the probe until it passes, the process exits, or the
    /// readiness timeout passes.
    async fn wait_ready(&self) -> Result<(), LaunchError> {
        let deadline = Instant::now() + self.spec.ready_timeout;
        let mut last_error = String::from("the probe never ran");
        loop {
            if let Some(status) = self.exit_status() {
                return Err(self.launch_error(&format!(
                    "it exited ({status}) before it was ready; last probe error: {last_error}"
                )));
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(self.launch_error(&format!(
                    "not ready within {:?}; last probe error: {last_error}",
                    self.spec.ready_timeout
                )));
            }
            let probe = (self.spec.probe)(&self.ctx);
            match timeout(remaining.min(PROBE_TRY_TIMEOUT), probe).await {
                Ok(Ok(())) => return self.check_port_owner(),
                Ok(Err(e)) => last_error = e,
                Err(_) => last_error = "the probe timed out".into(),
            }
            sleep(PROBE_INTERVAL).await;
        }
    }

    /// After the probe passed: fails if our process exited, or if the
    /// listener on the main port is another process's (which took the
    /// port before our server could bind it, so the probe talked to it).
    fn check_port_owner(&self) -> Result<(), LaunchError> {
        let Some(pid) = self.pid() else {
            return Err(self.launch_error("it was stopped while starting"));
        };
        if let Some(status) = self.exit_status() {
            return Err(self.launch_error(&format!("it exited ({status}) as the probe passed")));
        }
        match procfs::port_owner(self.ctx.port, pid) {
            // Nobody: a custom probe checked some other port.
            PortOwner::Group | PortOwner::Nobody => Ok(()),
            PortOwner::Other => Err(LaunchError {
                port_in_use: true,
                ..self.launch_error(&format!(
                    "another process listens on port {}: address already in use",
                    self.ctx.port
                ))
            }),
        }
    }

    /// A readiness error naming the server, program and ports, with the
    /// free space left for its data, the log's lines that report a failure
    /// (a Go panic's message comes before its long stack trace) and the
    /// log tail. Also tells whether the log blames a port already in use.
    fn launch_error(&self, reason: &str) -> LaunchError {
        let log_text = read_end(&self.log_path).unwrap_or_default();
        let tail = last_lines(&log_text, LOG_LINES_IN_ERRORS);
        let failures = failure_lines(&log_text);
        let free = data_root::available_bytes(self.dir.path())
            .map_or_else(|| "unknown".to_owned(), |b| format!("{} MiB", b >> 20));
        LaunchError {
            port_in_use: mentions_port_in_use(&tail) || mentions_port_in_use(&failures),
            message: format!(
                "test server {name:?} ({program}) on 127.0.0.1:{port} (ports {ports:?}) \
                 failed to start: {reason}\nfree space for its data in {dir}: {free}\n\
                 --- lines of {log} reporting a failure ---\n{failures}\n\
                 --- last {n} lines of {log} ---\n{tail}",
                name = self.spec.name,
                program = self.spec.program.display(),
                port = self.ctx.port,
                ports = self.ctx.ports,
                dir = self.dir.path().display(),
                n = LOG_LINES_IN_ERRORS,
                log = self.log_path.display(),
            ),
        }
    }

    /// Starts the server again on the same ports with the same data dir
    /// and waits until it is ready. A running server is killed first
    /// (`SIGKILL`); use [`Server::terminate`] before for a clean shutdown.
    /// The ports are not changed, so if another process took one meanwhile
    /// this fails.
    pub async fn restart(&self) -> Result<(), String> {
        self.stop();
        self.launch().await.map_err(|e| e.message)
    }

    /// Kills the process group with `SIGKILL` and reaps the process.
    /// Returns its exit status, or `None` if it was not running (already
    /// stopped). The ports and data dir stay reserved for a restart.
    pub fn stop(&self) -> Option<ExitStatus> {
        let mut child = self.lock_child().take()?;
        signal_group(&child, libc::SIGKILL);
        let status = child.wait().ok();
        cleanup::track_group(self.id, None);
        status
    }

    /// Sends `SIGTERM` to the process group, waits up to `grace` for the
    /// process to exit, then kills it like [`Server::stop`]. Returns the
    /// exit status, or `None` if it was not running.
    pub async fn terminate(&self, grace: Duration) -> Option<ExitStatus> {
        {
            let guard = self.lock_child();
            signal_group(guard.as_ref()?, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.exit_status().is_none() {
            sleep(EXIT_POLL_INTERVAL).await;
        }
        self.stop()
    }

    /// Freezes the whole process group with `SIGSTOP`: connections stay
    /// open but nothing is answered, like a long GC pause. Returns once
    /// every thread has stopped (a stop takes effect asynchronously, and
    /// a thread not yet stopped could still answer a request).
    pub async fn pause(&self) -> Result<(), String> {
        let pid = self.running_pid()?;
        signals::pause_group(pid).await
    }

    /// Resumes a paused server with `SIGCONT`.
    pub fn resume(&self) -> Result<(), String> {
        self.signal(libc::SIGCONT)
    }

    /// Sends `signal` to the process group, if the server runs.
    pub fn signal(&self, signal: libc::c_int) -> Result<(), String> {
        // The lock keeps `stop` from reaping the child (freeing its pid)
        // while the signal is sent.
        let child = self.lock_child();
        let pid = child
            .as_ref()
            .map(Child::id)
            .ok_or_else(|| self.not_running())?;
        signals::signal_group(pid, signal).map_err(|e| format!("signal {signal} to {pid}: {e}"))
    }

    /// The pid, or an error saying the server is not running.
    fn running_pid(&self) -> Result<u32, String> {
        self.pid().ok_or_else(|| self.not_running())
    }

    fn not_running(&self) -> String {
        format!("test server {:?} is not running", self.spec.name)
    }

    /// Whether the process is alive (a paused process counts as alive).
    pub fn is_running(&self) -> bool {
        self.exit_status().is_none()
    }

    /// The pid (also the process group id) of the running process, `None`
    /// after [`Server::stop`].
    pub fn pid(&self) -> Option<u32> {
        self.lock_child().as_ref().map(Child::id)
    }

    /// The main port.
    pub fn port(&self) -> u16 {
        self.ctx.port
    }

    /// All reserved ports, the main one first.
    pub fn ports(&self) -> &[u16] {
        &self.ctx.ports
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        self.ctx.addr()
    }

    /// The server's data dir (kept across restarts).
    pub fn data_dir(&self) -> &Path {
        &self.ctx.data_dir
    }

    /// The context the arguments were built from.
    pub fn context(&self) -> &ServerContext {
        &self.ctx
    }

    /// The spec the server was started from.
    pub fn spec(&self) -> &ServerSpec {
        &self.spec
    }

    /// The temp dir holding the data dir and the log; removed on drop.
    pub fn temp_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The file receiving the server's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `n` lines of the server's log (of all launches), for error
    /// messages. Empty if there is no log yet.
    pub fn log_tail(&self, n: usize) -> String {
        read_tail(&self.log_path, n).unwrap_or_default()
    }

    /// How the process ended if it has exited, else `None`. Does not reap
    /// it, so its pid (and group id) cannot be reused before `stop`.
    fn exit_status(&self) -> Option<String> {
        match self.lock_child().as_ref() {
            Some(child) => peek_exit(child.id()),
            None => Some("stopped by the harness".into()),
        }
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        // A panic elsewhere while holding the lock leaves a valid Option.
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        cleanup::forget(self.id);
        // The fields drop next: `dir` (the TempDir) removes the temp dir.
    }
}

/// Sends `signal` to the process group led by `child`. Errors are
/// ignored: the group may be gone already.
fn signal_group(child: &Child, signal: libc::c_int) {
    // The group cannot be a stranger's: its leader is our child, reaped
    // only after this (see `peek_exit`), so the id is not reused.
    let _ = signals::signal_group(child.id(), signal);
}

/// How process `pid` (our child) ended, or `None` while it runs (a
/// stopped process counts as running). Uses `WNOWAIT` so the zombie stays
/// for `Child::wait` to reap.
fn peek_exit(pid: u32) -> Option<String> {
    // SAFETY: waitid writes only into `info`, a zeroed siginfo_t we own.
    let info = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_PID, pid, &mut info, flags) != 0 {
            // ECHILD: already reaped, so certainly not running.
            return Some(format!("wait failed: {}", io::Error::last_os_error()));
        }
        info
    };
    // With WNOHANG and no exited child, waitid leaves si_pid zero.
    // SAFETY: the fields read are set for SIGCHLD-style siginfo.
    let (child_pid, status) = unsafe { (info.si_pid(), info.si_status()) };
    match (child_pid, info.si_code) {
        (0, _) => None,
        (_, libc::CLD_EXITED) => Some(format!("exit code {status}")),
        (_, _) => Some(format!("killed by signal {status}")),
    }
}
