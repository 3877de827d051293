//! Handing the terminal's foreground to CMD's process group and taking it
//! back, as a shell does for its jobs.

use std::os::fd::RawFd;

/// The terminal distlock runs in the foreground of.
#[derive(Debug)]
pub(super) struct Terminal {
    fd: RawFd,
    /// distlock's own process group.
    group: libc::pid_t,
}

impl Terminal {
    /// The first of stdin, stdout and stderr that is a terminal whose
    /// foreground is distlock's process group; `None` when distlock runs
    /// in the background or without a terminal.
    pub(super) fn foreground() -> Option<Self> {
        // SAFETY: getpgrp, isatty and tcgetpgrp have no memory-safety
        // preconditions.
        let group = unsafe { libc::getpgrp() };
        [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO]
            .into_iter()
            .find(|&fd| unsafe { libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == group })
            .map(|fd| Self { fd, group })
    }

    /// The terminal's file descriptor.
    pub(super) fn fd(&self) -> RawFd {
        self.fd
    }

    /// Readies distlock to leave the foreground: it ignores SIGTTOU for
    /// the rest of the run, so that neither taking the terminal back nor a
    /// message written while CMD has it (with `stty tostop`) stops it.
    pub(super) fn prepare(&self) {
        // SAFETY: setting a signal's disposition to ignored.
        unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
    }

    /// Gives the foreground to the process group `group`.
    pub(super) fn give_to(&self, group: libc::pid_t) {
        // SAFETY: tcsetpgrp on a descriptor we checked is a terminal.
        unsafe { libc::tcsetpgrp(self.fd, group) };
    }

    /// Takes the foreground back for distlock's group.
    pub(super) fn take_back(&self) {
        self.give_to(self.group);
    }

    /// Whether distlock's group has the foreground (after `fg`; not after
    /// `bg`).
    pub(super) fn is_ours(&self) -> bool {
        // SAFETY: tcgetpgrp has no memory-safety preconditions.
        unsafe { libc::tcgetpgrp(self.fd) == self.group }
    }
}
