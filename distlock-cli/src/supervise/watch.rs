//! Watching CMD's job until nothing of it is left: passing signals on,
//! the loss policy, SIGKILL after the grace period.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{LockGuard, LossReason};
use tokio::time::Instant;

use crate::cli::OnLost;
use crate::job::{Change, Job};
use crate::output::say;
use crate::signals::{self, Signals};

/// Watches CMD's job: passes signals on, enforces the loss policy, and
/// waits until the whole job is gone.
pub(super) struct Supervisor<'a> {
    pub(super) subject: &'a str,
    pub(super) program: &'a str,
    pub(super) on_lost: OnLost,
    pub(super) grace: Duration,
}

impl Supervisor<'_> {
    /// Waits until nothing of the job is left; returns how CMD ended and
    /// whether (why) the lock was lost meanwhile. A signal to distlock is
    /// passed to the whole job, a loss (under `kill`) sends it SIGTERM;
    /// either way what is left of the job after the grace period gets
    /// SIGKILL.
    pub(super) async fn watch(
        &self,
        mut job: Job,
        guard: &LockGuard,
        signals: &mut Signals,
    ) -> std::io::Result<(ExitStatus, Option<LossReason>)> {
        let mut lost = None;
        let mut kill_at: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                change = job.changed() => match change? {
                    Change::CmdEnded(status) if kill_at.is_none() => {
                        if self.cmd_ended(&job, status) {
                            job.signal(libc::SIGTERM);
                            kill_at = Some(Instant::now() + self.grace);
                        }
                    }
                    Change::CmdEnded(_) => {}
                    // Stopped longer than the lease lasts, the lock is
                    // lost: the job stays stopped for the loss to end it.
                    Change::Continued if guard.is_held() || self.on_lost == OnLost::Ignore => {
                        job.resume();
                    }
                    Change::Continued => {}
                    Change::Gone => {
                        let status = job.cmd_ended().ok_or_else(|| {
                            std::io::Error::other("the job ended before CMD did")
                        })?;
                        return Ok((status, lost));
                    }
                },
                signal = signals.recv() => {
                    job.signal(signal);
                    kill_at.get_or_insert_with(|| Instant::now() + self.grace);
                }
                reason = guard.lost(), if lost.is_none() => {
                    lost = Some(reason);
                    if self.on_loss(reason) {
                        job.signal(libc::SIGTERM);
                        kill_at = Some(Instant::now() + self.grace);
                    }
                }
                () = sleep_until(kill_at), if kill_at.is_some() => {
                    kill_at = None;
                    say(&format!(
                        "{} still running {} after being told to stop; sending SIGKILL",
                        self.what_runs(&job),
                        humantime::format_duration(self.grace)
                    ));
                    job.kill();
                }
            }
        }
    }

    /// CMD ended on its own. If it left processes running, says what
    /// happens to them: when CMD exited, distlock keeps the lock until
    /// they end (as a lock file inherited by a daemon would stay locked);
    /// when a signal killed CMD (Ctrl-C at the terminal, say), the job was
    /// interrupted and they are stopped too. Returns whether to stop them.
    fn cmd_ended(&self, job: &Job, status: ExitStatus) -> bool {
        let left = job.leftovers();
        if left.is_empty() {
            return false;
        }
        let left = format!("{} ({})", processes(left.len()), left.join(", "));
        match status.signal() {
            Some(signal) => {
                say(&format!(
                    "{} was killed by {}; stopping the {left} it left running",
                    self.program,
                    signals::name(signal)
                ));
                true
            }
            None => {
                say(&format!(
                    "{} exited with code {} but left {left} running; {} is kept until they end",
                    self.program,
                    signals::exit_code(status),
                    self.subject
                ));
                false
            }
        }
    }

    /// `sh` while CMD runs, else what it left running.
    fn what_runs(&self, job: &Job) -> String {
        match job.cmd_ended() {
            None => self.program.to_owned(),
            Some(_) => format!(
                "{} left by {}",
                processes(job.leftovers().len()),
                self.program
            ),
        }
    }

    /// Reports a loss; returns whether the job must be stopped.
    fn on_loss(&self, reason: LossReason) -> bool {
        match self.on_lost {
            OnLost::Kill => {
                say(&format!(
                    "{} lost ({reason}); stopping {} and every process it started",
                    self.subject, self.program
                ));
                true
            }
            OnLost::Ignore => {
                say(&format!(
                    "warning: {} lost ({reason}); {} keeps running (--on-lost ignore)",
                    self.subject, self.program
                ));
                false
            }
        }
    }
}

/// `1 process`, `3 processes`.
fn processes(count: usize) -> String {
    match count {
        1 => "1 process".to_owned(),
        n => format!("{n} processes"),
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
