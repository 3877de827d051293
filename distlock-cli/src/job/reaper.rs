//! Collecting the exits of distlock's children: CMD and, on Linux, every
//! orphan of the job handed to distlock as their subreaper.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// What one pass of [`Reaper::reap`] found.
#[derive(Debug, Default)]
pub(super) struct Reaped {
    /// CMD ended (exited or was killed), with this status.
    pub(super) cmd_ended: Option<ExitStatus>,
    /// CMD was stopped by a signal.
    pub(super) cmd_stopped: bool,
    /// Children of distlock remain (running, stopped or not yet reaped).
    pub(super) children_left: bool,
}

/// Reaps children as SIGCHLD announces them.
#[derive(Debug)]
pub(super) struct Reaper {
    sigchld: Signal,
}

impl Reaper {
    /// Starts listening for SIGCHLD; do this before spawning, or an early
    /// exit could go unannounced.
    pub(super) fn install() -> io::Result<Self> {
        Ok(Self {
            sigchld: signal(SignalKind::child())?,
        })
    }

    /// Reaps every child that has ended since the last pass, without
    /// blocking. Stops at CMD's end so that it is reported once, before
    /// anything that ends later.
    pub(super) fn reap(&self, cmd: libc::pid_t) -> io::Result<Reaped> {
        let mut reaped = Reaped::default();
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes only to `status`.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::WUNTRACED) };
            match pid {
                0 => {
                    reaped.children_left = true;
                    return Ok(reaped);
                }
                -1 => {
                    let error = io::Error::last_os_error();
                    return match error.raw_os_error() {
                        Some(libc::ECHILD) => Ok(reaped),
                        Some(libc::EINTR) => continue,
                        _ => Err(error),
                    };
                }
                pid if pid == cmd && libc::WIFSTOPPED(status) => reaped.cmd_stopped = true,
                pid if pid == cmd => {
                    reaped.cmd_ended = Some(ExitStatus::from_raw(status));
                    reaped.children_left = true;
                    return Ok(reaped);
                }
                // An orphan of the job, ended or stopped: nothing to do
                // but collect it.
                _ => {}
            }
        }
    }

    /// Waits until the next SIGCHLD.
    pub(super) async fn next_signal(&mut self) {
        if self.sigchld.recv().await.is_none() {
            // Only when the runtime shuts down.
            std::future::pending::<()>().await;
        }
    }
}
