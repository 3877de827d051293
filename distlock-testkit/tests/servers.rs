//! Tests of the server supervisor, on real processes and sockets: the
//! servers are small `python3` scripts.

mod common;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{assert_mentions, exchange, python, read_within_quick, round_trip, QUICK, STALL};
use distlock_testkit::{shared_server, spawn_child, spawn_child_blocking, Server, ServerSpec};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// A TCP echo server on the port given as first argument. `SO_REUSEADDR`
/// lets a restart bind the port again right after a kill, as real
/// servers do.
const ECHO_SERVER: &str = r#"
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print("echo server listening on", sys.argv[1], flush=True)
def echo(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                break
            c.sendall(d)
while True:
    c, _ = s.accept()
    threading.Thread(target=echo, args=(c,), daemon=True).start()
"#;

/// A server launch that fails the way a server does when its port is taken.
const PORT_TAKEN: &str =
    "import sys; print('bind: Address already in use', flush=True); sys.exit(1)";

fn echo_spec(name: &str) -> ServerSpec {
    ServerSpec::new(name, python())
        .args(|ctx| ["-c".into(), ECHO_SERVER.into(), ctx.port.to_string()])
}

async fn echo_server() -> Server {
    echo_spec("echo").start().await.unwrap()
}

/// Whether process `pid` is gone (a zombie counts as gone: it runs no
/// code, and PID 1 of a container may never reap it).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
    }
}

// ---------------------------------------------------------------- servers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_waits_until_ready_and_echoes() {
    let server = echo_server().await;
    assert!(server.is_running());
    assert!(server.pid().is_some());
    assert_eq!(server.ports(), &[server.port()]);
    assert_eq!(server.addr().port(), server.port());
    assert!(server.data_dir().is_dir());
    assert_eq!(round_trip(server.addr(), b"hello").await.unwrap(), b"hello");
    assert!(server.log_tail(5).contains("echo server listening on"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stalls_a_request_and_resume_completes_it() {
    let server = echo_server().await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    assert_eq!(exchange(&mut stream, b"one").await.unwrap(), b"one");

    server.pause().await.unwrap();
    assert!(
        server.is_running(),
        "a paused server still counts as running"
    );
    let stalled = timeout(STALL, exchange(&mut stream, b"two")).await;
    assert!(stalled.is_err(), "a paused server answered: {stalled:?}");

    server.resume().unwrap();
    // The bytes sent while paused were buffered by the kernel.
    assert_eq!(read_within_quick(&mut stream, 3).await, b"two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_then_restart_keeps_port_and_data_dir() {
    let server = echo_server().await;
    let (port, first_pid) = (server.port(), server.pid().unwrap());
    std::fs::write(server.data_dir().join("state"), "kept").unwrap();

    assert!(server.stop().is_some());
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert!(server.stop().is_none(), "stopping twice is a no-op");
    assert!(TcpStream::connect(server.addr()).await.is_err());
    assert!(server.pause().await.is_err());

    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), Some(first_pid));
    assert_eq!(
        std::fs::read_to_string(server.data_dir().join("state")).unwrap(),
        "kept"
    );
    assert_eq!(round_trip(server.addr(), b"again").await.unwrap(), b"again");
    // Both launches are in the one log.
    let log = server.log_tail(100);
    let listening = log
        .lines()
        .filter(|l| l.starts_with("echo server listening on"));
    assert_eq!(listening.count(), 2, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_of_a_running_server_replaces_it() {
    let server = echo_server().await;
    let first_pid = server.pid().unwrap();
    server.restart().await.unwrap();
    assert!(process_gone(first_pid));
    assert_eq!(round_trip(server.addr(), b"x").await.unwrap(), b"x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_kills_the_process_and_removes_the_temp_dir() {
    let server = echo_server().await;
    let pid = server.pid().unwrap();
    let dir = server.temp_dir().to_owned();
    drop(server);
    // SAFETY: kill with signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    let errno = io::Error::last_os_error().raw_os_error();
    assert!(!alive, "pid {pid} survived the drop");
    assert_eq!(errno, Some(libc::ESRCH));
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_sends_sigterm_first() {
    let server = echo_server().await;
    let started = Instant::now();
    let status = server.terminate(QUICK).await.expect("it was running");
    // Python dies of SIGTERM at once, long before the grace ends.
    assert!(started.elapsed() < QUICK, "took {:?}", started.elapsed());
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    assert!(server.terminate(QUICK).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_exits_at_once_fails_fast_quoting_its_log() {
    let started = Instant::now();
    let err = ServerSpec::new("boomer", python())
        .args(|_| ["-c", "import sys; print('boom', flush=True); sys.exit(3)"])
        .start()
        .await
        .unwrap_err();
    let python = python().display().to_string();
    assert_mentions(&err, &["boom", "exit code 3", "127.0.0.1:", &python]);
    // The exit is noticed; the 30 s readiness timeout is not waited out.
    assert!(started.elapsed() < QUICK, "took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_timeout_names_the_last_probe_error() {
    let err = echo_spec("never-ready")
        .probe(|_| Box::pin(async { Err("still warming up".to_string()) }))
        .ready_timeout(Duration::from_millis(300))
        .start()
        .await
        .unwrap_err();
    assert_mentions(
        &err,
        &[
            "not ready within 300ms",
            "still warming up",
            "echo server listening on",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_ports_and_custom_probe() {
    // The echo server listens on the second port only; the probe checks it.
    let server = ServerSpec::new("peer-port", python())
        .extra_ports(2)
        .args(|ctx| ["-c".into(), ECHO_SERVER.into(), ctx.ports[1].to_string()])
        .probe(|ctx| {
            let peer = SocketAddr::from(([127, 0, 0, 1], ctx.ports[1]));
            Box::pin(distlock_testkit::probe::tcp_request(peer, b"ping", "ping"))
        })
        .start()
        .await
        .unwrap();
    let ports = server.ports().to_vec();
    assert_eq!(ports.len(), 3);
    assert_eq!(ports[0], server.port());
    assert!(ports[1] != ports[0] && ports[2] != ports[1] && ports[2] != ports[0]);
    let peer = SocketAddr::from(([127, 0, 0, 1], ports[1]));
    assert_eq!(round_trip(peer, b"peer").await.unwrap(), b"peer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_taken_meanwhile_is_retried_on_fresh_ports() {
    // The first launch pretends its port was taken; the second works.
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("tried");
    let script = format!(
        "import os, sys\n\
         if not os.path.exists({marker:?}):\n\
         \x20   open({marker:?}, 'w').close()\n\
         \x20   print('bind: Address already in use', flush=True)\n\
         \x20   sys.exit(1)\n\
         exec(sys.argv[2])\n",
        marker = marker.display().to_string(),
    );
    let server = ServerSpec::new("retry", python())
        .args(move |ctx| {
            [
                "-c".into(),
                script.clone(),
                ctx.port.to_string(),
                ECHO_SERVER.into(),
            ]
        })
        .start()
        .await
        .unwrap();
    assert!(marker.exists());
    assert_eq!(round_trip(server.addr(), b"ok").await.unwrap(), b"ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_answered_by_another_process_does_not_count() {
    // On the first launch another listener (this test) holds the port and
    // the server does not listen at all: the probe connects, but to the
    // wrong process. The harness must notice and retry on fresh ports.
    let hijacked = Arc::new(Mutex::new(None::<(u16, std::net::TcpListener)>));
    let hijack = hijacked.clone();
    let server = ServerSpec::new("hijacked", python())
        .args(move |ctx| {
            let mut hijack = hijack.lock().unwrap();
            if hijack.is_none() {
                match std::net::TcpListener::bind(ctx.addr()) {
                    Ok(listener) => {
                        *hijack = Some((ctx.port, listener));
                        return vec!["-c".into(), "import time; time.sleep(30)".into()];
                    }
                    // A third process took the picked port first: fail this
                    // launch the way a server does, so the harness moves on
                    // and the hijack is tried again on the next port.
                    Err(_) => return vec!["-c".into(), PORT_TAKEN.into()],
                }
            }
            vec!["-c".into(), ECHO_SERVER.into(), ctx.port.to_string()]
        })
        .start()
        .await
        .unwrap();
    let hijacked_port = hijacked.lock().unwrap().as_ref().unwrap().0;
    assert_ne!(server.port(), hijacked_port);
    assert_eq!(round_trip(server.addr(), b"mine").await.unwrap(), b"mine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_server_starts_once_and_remembers_failures() {
    let a = shared_server("harness-echo", || Ok(echo_spec("shared-echo")))
        .await
        .unwrap();
    let b = shared_server("harness-echo", || panic!("must not start twice"))
        .await
        .unwrap();
    assert!(std::ptr::eq(a, b));
    assert_eq!(round_trip(a.addr(), b"shared").await.unwrap(), b"shared");

    let err = shared_server("harness-broken", || Err("no such server".to_string())).await;
    assert_eq!(err.unwrap_err(), "no such server");
    let again = shared_server("harness-broken", || panic!("a failure is remembered")).await;
    assert_eq!(again.unwrap_err(), "no such server");
}

#[test]
fn a_child_outlives_the_thread_that_asked_for_it() {
    // PR_SET_PDEATHSIG fires when the forking *thread* exits. Ask from a
    // short-lived thread with its own runtime, as a test would; the child
    // must survive because the fork happened on the spawner thread.
    let child = std::thread::spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut sleep = Command::new("sleep");
        sleep.arg("30").stdout(Stdio::null());
        runtime.block_on(spawn_child(sleep)).unwrap()
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let pid = child.id();
    assert!(!process_gone(pid), "the child died with the thread");
    let mut child = child;
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A copy of this test binary running `helper_holding_a_shared_server`.
struct Helper {
    process: std::process::Child,
    server_pid: u32,
    server_dir: PathBuf,
}

/// Runs this test binary again as a helper holding a shared server, in
/// `mode` "sleep" (until killed) or "exit" (at once).
fn start_helper(mode: &str) -> Helper {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "helper_holding_a_shared_server"])
        .args(["--ignored", "--nocapture"])
        .env("HARNESS_HELPER_MODE", mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // Through the spawner, so a failing test does not leave it running.
    let mut process = spawn_child_blocking(command).unwrap();
    // Drain all output on a thread: if the pipe closed early, the helper's
    // next println! would fail and make it exit with an error.
    let stdout = io::BufReader::new(process.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in io::BufRead::lines(stdout).map_while(Result::ok) {
            if let Some(server) = line.strip_prefix("SERVER ") {
                let (pid, dir) = server.split_once(' ').unwrap();
                let _ = tx.send((pid.parse().unwrap(), PathBuf::from(dir)));
            }
        }
    });
    let (server_pid, server_dir) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the helper prints the server pid");
    Helper {
        process,
        server_pid,
        server_dir,
    }
}

/// Waits up to [`QUICK`] for process `pid` to be gone.
fn wait_gone(pid: u32) -> bool {
    let deadline = Instant::now() + QUICK;
    while !process_gone(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    process_gone(pid)
}

#[test]
fn a_shared_server_dies_when_the_test_process_is_killed() {
    let mut helper = start_helper("sleep");
    assert!(!process_gone(helper.server_pid));
    helper.process.kill().unwrap(); // SIGKILL: no exit handlers run.
    helper.process.wait().unwrap();
    assert!(
        wait_gone(helper.server_pid),
        "the server outlived its test process"
    );
    // Only the temp dir is left behind: nothing can run after a SIGKILL.
    std::fs::remove_dir_all(&helper.server_dir).unwrap();
}

#[test]
fn a_shared_server_dies_when_the_test_process_exits() {
    let mut helper = start_helper("exit");
    assert!(helper.process.wait().unwrap().success());
    assert!(
        wait_gone(helper.server_pid),
        "the server outlived its test process"
    );
    assert!(
        !helper.server_dir.exists(),
        "the exit hook did not remove it"
    );
}

/// Not a test: run by the two tests above in a child test process.
#[tokio::test]
#[ignore = "helper process for other tests"]
async fn helper_holding_a_shared_server() {
    let Ok(mode) = std::env::var("HARNESS_HELPER_MODE") else {
        return;
    };
    let server = shared_server("helper", || Ok(echo_spec("helper")))
        .await
        .unwrap();
    let dir = server.temp_dir().display();
    println!("SERVER {} {dir}", server.pid().unwrap());
    if mode == "sleep" {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
}
