//! `distlock run KEY -- CMD`: hold a lock while a command runs.
//!
//! CMD stays in distlock's process group, so a Ctrl-C at the terminal
//! reaches both; signals sent to distlock alone (`kill PID`, a service
//! manager) are forwarded. Either way distlock outlives CMD, releases the
//! lock, and exits with CMD's code.
//!
//! Loss policy: with `--on-lost kill` a lock known lost at any time while
//! CMD ran — noticed while it ran, or only when the release finds the lock
//! gone — ends in exit code 76, even if CMD succeeded, because CMD's work
//! may have overlapped with another holder's. On Linux, CMD is also
//! SIGKILLed if distlock dies without a chance to act (SIGKILL, OOM
//! killer): the lock dies with distlock, and CMD must not outlive it.

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{LockError, LockGuard, LockOptions, Locker, LossReason};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::cli::{OnLost, RunArgs, Wait};
use crate::exit::{Failure, CANNOT_EXECUTE, LOST, NOT_FOUND, SIGNAL_BASE, TEMPFAIL};
use crate::output::say;
use crate::signals::{self, Signals};
use crate::url::StoreUrl;

/// How long `run` asks the store who holds a lock it timed out on, before
/// giving up on naming the holder.
const INSPECT_LIMIT: Duration = Duration::from_secs(2);

/// Takes the lock, runs CMD under it, releases it; returns the exit code.
pub(crate) async fn run(store: &StoreUrl, args: RunArgs) -> Result<i32, Failure> {
    let mut signals = Signals::install()
        .map_err(|e| Failure::other(format!("cannot install signal handlers: {e}")))?;
    // A signal while connecting or waiting cancels the wait (lock-core's
    // acquisition is cancel-safe) and ends distlock like the signal would.
    let (locker, guard) = tokio::select! {
        acquired = acquire(store, &args.key, args.wait) => acquired?,
        signal = signals.recv() => {
            return Err(Failure::new(
                SIGNAL_BASE + signal,
                format!("{} received while waiting for lock {:?}", signals::name(signal), args.key),
            ));
        }
    };

    let child = match spawn(&args.command, &locker, &guard, args.on_lost) {
        Ok(child) => child,
        Err(failure) => {
            release_quietly(store, guard).await;
            return Err(failure);
        }
    };
    let program = args.command[0].to_string_lossy().into_owned();
    let supervisor = Supervisor {
        key: &args.key,
        program: &program,
        on_lost: args.on_lost,
        grace: args.grace,
    };
    let (status, lost) = match supervisor.watch(child, &guard, &mut signals).await {
        Ok(ended) => ended,
        Err(error) => {
            release_quietly(store, guard).await;
            return Err(Failure::other(format!("lost track of {program}: {error}")));
        }
    };
    // Always release; a loss found only now counts like one seen earlier.
    let found_at_release = release(store, &args.key, guard).await;
    let lost = lost.or(found_at_release);
    Ok(match (lost, args.on_lost) {
        (Some(_), OnLost::Kill) => LOST,
        _ => signals::exit_code(status),
    })
}

/// Connects and takes the lock within the wait, naming the holder if it
/// could not.
async fn acquire(
    store: &StoreUrl,
    key: &str,
    wait: Option<Wait>,
) -> Result<(Locker, LockGuard), Failure> {
    let locker = store.connect().await?;
    let options = match wait {
        None => LockOptions::new(),
        Some(Wait::Forever) => LockOptions::new().wait_forever(),
        Some(Wait::For(wait)) => LockOptions::new().wait(wait),
    };
    match locker.lock_with(key, options).await {
        Ok(guard) => Ok((locker, guard)),
        Err(LockError::Timeout { waited, .. }) => {
            let wait = match wait {
                Some(Wait::For(wait)) => wait,
                _ => locker.options().wait.unwrap_or(waited),
            };
            Err(timed_out(store, &locker, key, wait).await)
        }
        Err(error) => Err(store.failure(error)),
    }
}

/// The exit-75 failure: `lock "KEY" is held by OWNER (token T); gave up after 2s`.
async fn timed_out(store: &StoreUrl, locker: &Locker, key: &str, wait: Duration) -> Failure {
    let holder = match tokio::time::timeout(INSPECT_LIMIT, locker.inspect(key)).await {
        Ok(Ok(Some(info))) => format!("is held by {} (token {})", info.owner, info.token),
        Ok(Ok(None)) => "was held until just now".to_owned(),
        Ok(Err(_)) | Err(_) => "is held".to_owned(),
    };
    let gave_up = if wait.is_zero() {
        "gave up at once (--wait 0)".to_owned()
    } else {
        format!("gave up after {}", humantime::format_duration(wait))
    };
    Failure::new(
        TEMPFAIL,
        store.scrub(&format!("lock {key:?} {holder}; {gave_up}")),
    )
}

/// Starts CMD with the lock's details in its environment.
fn spawn(
    command: &[OsString],
    locker: &Locker,
    guard: &LockGuard,
    on_lost: OnLost,
) -> Result<Child, Failure> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Failure::usage("no command given after `--`"))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env("DISTLOCK_KEY", guard.key())
        .env("DISTLOCK_TOKEN", guard.token().to_string())
        .env("DISTLOCK_OWNER", guard.owner().as_str())
        .env("DISTLOCK_NAMESPACE", locker.namespace().as_str());
    if on_lost == OnLost::Kill {
        // If distlock itself dies (SIGKILL, OOM), its lock goes with it;
        // under `kill` CMD must not carry on unprotected.
        signals::kill_with_parent(&mut command);
    }
    command.spawn().map_err(|error| {
        let code = match error.kind() {
            std::io::ErrorKind::NotFound => NOT_FOUND,
            _ => CANNOT_EXECUTE,
        };
        Failure::new(
            code,
            format!("cannot run {}: {error}", program.to_string_lossy()),
        )
    })
}

/// Watches CMD: forwards signals, enforces the loss policy.
struct Supervisor<'a> {
    key: &'a str,
    program: &'a str,
    on_lost: OnLost,
    grace: Duration,
}

impl Supervisor<'_> {
    /// Waits for CMD to exit; returns how it ended and whether (why) the
    /// lock was lost meanwhile.
    async fn watch(
        &self,
        mut child: Child,
        guard: &LockGuard,
        signals: &mut Signals,
    ) -> std::io::Result<(ExitStatus, Option<LossReason>)> {
        // The pid stays valid until `wait` reaps CMD, and `wait` is polled
        // first, so a signal is never sent to a recycled pid.
        let pid = child.id();
        let mut lost = None;
        let mut kill_at: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                status = child.wait() => return Ok((status?, lost)),
                signal = signals.recv() => {
                    if let Some(pid) = pid {
                        signals::send(pid, signal);
                    }
                }
                reason = guard.lost(), if lost.is_none() => {
                    lost = Some(reason);
                    self.on_loss(reason, pid);
                    if self.on_lost == OnLost::Kill {
                        kill_at = Some(Instant::now() + self.grace);
                    }
                }
                () = sleep_until(kill_at), if kill_at.is_some() => {
                    kill_at = None;
                    say(&format!(
                        "{} still running {} after SIGTERM; sending SIGKILL",
                        self.program,
                        humantime::format_duration(self.grace)
                    ));
                    let _ = child.start_kill();
                }
            }
        }
    }

    fn on_loss(&self, reason: LossReason, pid: Option<u32>) {
        match self.on_lost {
            OnLost::Kill => {
                say(&format!(
                    "lock {:?} lost ({reason}); stopping {}",
                    self.key, self.program
                ));
                if let Some(pid) = pid {
                    signals::send(pid, libc::SIGTERM);
                }
            }
            OnLost::Ignore => say(&format!(
                "warning: lock {:?} lost ({reason}); {} keeps running (--on-lost ignore)",
                self.key, self.program
            )),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Releases the lock after CMD ended. Returns the loss reason if the
/// release found the lock already lost; other failures are warned about
/// (the lock will expire, or — for file locks — vanish with this process).
async fn release(store: &StoreUrl, key: &str, guard: LockGuard) -> Option<LossReason> {
    let already_lost = !guard.is_held();
    match guard.release().await {
        Ok(()) => None,
        Err(LockError::Lost { reason, .. }) => {
            if !already_lost {
                say(&format!(
                    "warning: lock {key:?} was lost while the command ran ({reason})"
                ));
            }
            Some(reason)
        }
        Err(error) => {
            let failure = store.failure(error);
            say(&format!(
                "warning: could not release lock {key:?}: {failure}"
            ));
            None
        }
    }
}

/// Releases the lock on an error path, where the error already reported
/// matters more than how the release went.
async fn release_quietly(store: &StoreUrl, guard: LockGuard) {
    if let Err(error) = guard.release().await {
        tracing::debug!(error = %store.failure(error), "release after failed run");
    }
}
