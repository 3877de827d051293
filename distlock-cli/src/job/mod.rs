//! CMD and every process it starts, as one job that can be signalled as a
//! whole and that is over only when all of it is gone.
//!
//! CMD runs in a process group of its own, so one signal reaches it and
//! the processes it starts (a shell's children, a pipeline). Processes
//! can leave that group (`setsid`, a daemon that double-forks); on Linux
//! distlock is a *child subreaper*, so every such process whose parent
//! exits is handed to distlock instead of to init, stays in distlock's
//! tree of descendants, and is signalled and waited for like the rest.
//! The job is over when distlock has no child left: with a subreaper, a
//! descendant that is still alive always has distlock, or a living
//! descendant, as its parent.
//!
//! Elsewhere (no subreaper) the job is CMD and its process group:
//! processes that leave the group escape, and distlock does not wait for
//! what CMD left running.
//!
//! When distlock runs in the foreground of a terminal, CMD's group gets
//! the terminal (as a shell gives it to a job), so CMD can read from it
//! and Ctrl-C or Ctrl-Z reach CMD's processes directly; distlock takes
//! it back when the job is over. If the job is stopped from the terminal
//! (Ctrl-Z), distlock stops too, so the shell sees the job stopped, and
//! continues the job when it is continued.
//!
//! One reaper collects every child's exit: nothing else in `run` and
//! `elect` may wait for child processes.

mod reaper;
mod terminal;
mod tree;

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};

use reaper::{Reaped, Reaper};
use terminal::Terminal;

/// What happened to the job, as [`Job::changed`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// CMD itself ended; processes it started may still run.
    CmdEnded(ExitStatus),
    /// The job was stopped from the terminal and distlock with it, and
    /// distlock has just been continued: the job stays stopped until
    /// [`Job::resume`] (the lock may have been lost meanwhile).
    Continued,
    /// Nothing of the job is left.
    Gone,
}

/// A running CMD with everything it started. See the module docs.
#[derive(Debug)]
pub(crate) struct Job {
    /// CMD's pid, which is also its process group's id.
    cmd: libc::pid_t,
    reaper: Reaper,
    terminal: Option<Terminal>,
    /// CMD's end, once reaped.
    cmd_ended: Option<ExitStatus>,
}

impl Job {
    /// Starts `command` as a job: in its own process group, in the
    /// terminal's foreground if distlock is, with distlock as the
    /// subreaper of everything it starts (Linux).
    pub(crate) fn start(mut command: Command) -> io::Result<Self> {
        // Listen for SIGCHLD before there is a child to send it.
        let reaper = Reaper::install()?;
        tree::become_subreaper()?;
        let terminal = Terminal::foreground();
        if let Some(terminal) = &terminal {
            terminal.prepare();
        }
        let tty = terminal.as_ref().map(Terminal::fd);
        // SAFETY: the closure runs in the forked child before exec and
        // calls only async-signal-safe functions (setpgid, tcsetpgrp,
        // getpid, signal).
        unsafe {
            command.pre_exec(move || enter_own_group(tty));
        }
        let child = command.spawn()?;
        let cmd = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
        // The child puts itself in its group before exec; doing it here
        // too closes the window in which a signal to the group would miss
        // it. It fails harmlessly once the child has exec'd.
        // SAFETY: setpgid has no memory-safety preconditions.
        unsafe { libc::setpgid(cmd, cmd) };
        if let Some(terminal) = &terminal {
            terminal.give_to(cmd);
        }
        // The std handle is dropped without waiting: the reaper collects
        // CMD's exit with everyone else's.
        drop(child);
        Ok(Self {
            cmd,
            reaper,
            terminal,
            cmd_ended: None,
        })
    }

    /// Waits for the next change: CMD's end (reported once), then the end
    /// of the whole job. Stops and continues distlock along with the job
    /// when the job is stopped from the terminal.
    pub(crate) async fn changed(&mut self) -> io::Result<Change> {
        loop {
            let Reaped {
                cmd_ended,
                cmd_stopped,
                children_left,
            } = self.reaper.reap(self.cmd)?;
            if let Some(status) = cmd_ended {
                self.cmd_ended = Some(status);
                return Ok(Change::CmdEnded(status));
            }
            if !children_left {
                if let Some(terminal) = &self.terminal {
                    terminal.take_back();
                }
                return Ok(Change::Gone);
            }
            if cmd_stopped && self.stop_along() {
                return Ok(Change::Continued);
            }
            self.reaper.next_signal().await;
        }
    }

    /// Whether CMD itself has ended (the job may live on).
    pub(crate) fn cmd_ended(&self) -> Option<ExitStatus> {
        self.cmd_ended
    }

    /// Sends `signal` to CMD's process group and to every other process
    /// of the job, then SIGCONT, so that a stopped process sees it.
    pub(crate) fn signal(&self, signal: i32) {
        self.send_everywhere(signal);
        if signal != libc::SIGKILL && signal != libc::SIGCONT {
            self.send_everywhere(libc::SIGCONT);
        }
    }

    /// SIGKILLs every process of the job, again until a pass finds no
    /// process it had not already killed (one forking meanwhile cannot
    /// slip through).
    pub(crate) fn kill(&self) {
        let mut killed = Vec::new();
        loop {
            self.send_to_group(libc::SIGKILL);
            let fresh: Vec<_> = tree::descendants()
                .into_iter()
                .filter(|p| !killed.contains(&p.pid))
                .collect();
            if fresh.is_empty() {
                return;
            }
            for process in fresh {
                send_to(process.pid, libc::SIGKILL);
                killed.push(process.pid);
            }
        }
    }

    /// The processes still running besides CMD, for messages:
    /// `"123 sleep, 456 nginx"`.
    pub(crate) fn leftovers(&self) -> Vec<String> {
        tree::descendants()
            .into_iter()
            .filter(|p| p.pid != self.cmd && !p.is_zombie())
            .map(|p| format!("{} {}", p.pid, p.name))
            .collect()
    }

    fn send_everywhere(&self, signal: i32) {
        self.send_to_group(signal);
        for process in tree::descendants() {
            if process.group != self.cmd {
                send_to(process.pid, signal);
            }
        }
    }

    /// Sends `signal` to CMD's process group while its id cannot have
    /// been reused: CMD not yet reaped, or members of the group left
    /// (a group id stays reserved while the group has members).
    fn send_to_group(&self, signal: i32) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        let members_left = || unsafe { libc::kill(-self.cmd, 0) } == 0;
        if self.cmd_ended.is_none() || members_left() {
            send_to_group(self.cmd, signal);
        }
    }

    /// The job was stopped from the terminal (Ctrl-Z): takes the terminal
    /// back and stops distlock, so that the shell sees the job stopped.
    /// Returns once distlock is continued (`fg`, `bg`); `false` if the
    /// job is not in a terminal's foreground (then it stays as it is).
    fn stop_along(&self) -> bool {
        let Some(terminal) = &self.terminal else {
            return false;
        };
        terminal.take_back();
        // SAFETY: raise has no memory-safety preconditions. Execution
        // resumes here when the shell sends SIGCONT.
        unsafe { libc::raise(libc::SIGSTOP) };
        true
    }

    /// Continues a job stopped from the terminal, in the terminal's
    /// foreground again if distlock was continued there (`fg`, not `bg`).
    pub(crate) fn resume(&self) {
        if let Some(terminal) = &self.terminal {
            if terminal.is_ours() {
                terminal.give_to(self.cmd);
            }
        }
        self.send_to_group(libc::SIGCONT);
    }
}

/// In the child, before exec: a process group of its own and, if `tty`,
/// the terminal's foreground. distlock ignores SIGTTOU (see
/// [`Terminal::prepare`]) and the child inherited that; CMD gets the
/// default back.
fn enter_own_group(tty: Option<libc::c_int>) -> io::Result<()> {
    // SAFETY: async-signal-safe calls with valid arguments.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(fd) = tty {
            libc::tcsetpgrp(fd, libc::getpid());
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
        }
    }
    Ok(())
}

/// Sends `signal` to every process of the group `group`. Errors are
/// ignored: the only likely one is that the group is empty.
fn send_to_group(group: libc::pid_t, signal: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(-group, signal) };
}

/// Sends `signal` to `pid`, a descendant of distlock found by the latest
/// scan. Only the descendant's own parent can reap it between that scan
/// and this call, a window of microseconds, so the pid names a recycled
/// process about as rarely as with `pkill`.
fn send_to(pid: libc::pid_t, signal: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid, signal) };
}
