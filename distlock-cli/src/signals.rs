//! The signals `run` forwards to CMD, and reading how CMD ended.

use std::io;
#[cfg(target_os = "linux")]
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::exit::{FAILURE, SIGNAL_BASE};

/// SIGINT, SIGTERM and SIGHUP sent to distlock, caught so that distlock
/// can pass them on to CMD and still release the lock afterwards.
///
/// Installing these replaces the default action (terminate) for the rest
/// of the process, so every wait `run` does must also listen here.
#[derive(Debug)]
pub(crate) struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    pub(crate) fn install() -> io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal's number.
    pub(crate) async fn recv(&mut self) -> i32 {
        // `recv` yields `None` only when the runtime shuts down; a stream
        // that ended just drops out of the race.
        tokio::select! {
            Some(()) = self.interrupt.recv() => libc::SIGINT,
            Some(()) = self.terminate.recv() => libc::SIGTERM,
            Some(()) = self.hangup.recv() => libc::SIGHUP,
            else => std::future::pending().await,
        }
    }
}

/// Makes the kernel SIGKILL the command's process when distlock dies
/// (Linux `PR_SET_PDEATHSIG`; elsewhere nothing).
///
/// The death signal fires when the *thread* that spawned the child ends.
/// `run` spawns CMD from the future that `main` drives with `block_on`, so
/// that thread is the main thread, which lives as long as the process.
pub(crate) fn kill_with_parent(command: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
        // SAFETY: the closure runs in the forked child before exec and
        // calls only async-signal-safe functions (prctl, getppid, _exit).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // distlock may have died before prctl took effect.
                if libc::getppid() != parent {
                    libc::_exit(crate::exit::LOST);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// The name of a signal for messages (`SIGTERM`), or its number.
pub(crate) fn name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        other => format!("signal {other}"),
    }
}

/// The shell's view of how a process ended: its exit code, or 128+N for
/// death by signal N.
pub(crate) fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => SIGNAL_BASE + signal,
        (None, None) => FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
