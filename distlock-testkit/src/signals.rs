//! Signals to the process group of a child from [`crate::spawn_child`]
//! (its pid is also its process group id).

use std::io;
use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::procfs;

/// How long [`pause_group`] waits for every thread to stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often [`pause_group`] checks whether every thread stopped.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// Sends `signal` to every process in process group `group`.
///
/// Only pass the pid of a child not yet reaped: once reaped, its id may
/// be reused by an unrelated process group.
pub fn signal_group(group: u32, signal: libc::c_int) -> io::Result<()> {
    let group = libc::pid_t::try_from(group)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(-group, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Freezes process group `group` with `SIGSTOP` and returns once every
/// thread in it has stopped.
///
/// `kill` returns before the stop takes effect: in a multi-threaded
/// process one thread starts the group stop and the others stop when they
/// next run, so a thread woken by incoming data could still answer it.
/// Tests that pause a server or a lock holder need it frozen for real.
pub async fn pause_group(group: u32) -> Result<(), String> {
    signal_group(group, libc::SIGSTOP).map_err(|e| format!("SIGSTOP to group {group}: {e}"))?;
    let deadline = Instant::now() + STOP_TIMEOUT;
    while !procfs::group_stopped(group) {
        if Instant::now() >= deadline {
            return Err(format!(
                "process group {group} did not stop within {STOP_TIMEOUT:?} of SIGSTOP"
            ));
        }
        sleep(STOP_POLL_INTERVAL).await;
    }
    Ok(())
}

/// Resumes a paused process group with `SIGCONT`.
pub fn resume_group(group: u32) -> io::Result<()> {
    signal_group(group, libc::SIGCONT)
}
