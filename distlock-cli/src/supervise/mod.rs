//! Running CMD under something held — a lock (`run`) or a leadership
//! (`elect`): taking it within `--wait`, starting CMD with its details in
//! the environment as a [`Job`] (CMD and everything it starts), passing
//! signals on, enforcing the loss policy, and giving it back once nothing
//! of the job is left.
//!
//! A signal sent to distlock (`kill PID`, a service manager) is passed to
//! the whole job; a loss under `--on-lost kill` sends it SIGTERM; either
//! way, what is left of the job after `--grace` gets SIGKILL. If CMD
//! exits on its own but leaves processes running, distlock keeps the lock
//! until they end; if a signal killed CMD (Ctrl-C), they are stopped as
//! after a loss. On Linux, under `--on-lost kill`, CMD is also SIGKILLed
//! if distlock dies without a chance to act (SIGKILL, OOM killer): the
//! lock dies with distlock, and CMD must not outlive it (what CMD started
//! is not reached then).

mod take;
mod watch;

use std::ffi::OsString;
use std::future::Future;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{LockError, LockGuard, LockOptions, Locker, LossReason};

use crate::cli::{CmdArgs, OnLost};
use crate::exit::{Failure, CANNOT_EXECUTE, NOT_FOUND};
use crate::job::Job;
use crate::output::say;
use crate::signals::{self, Signals};
use crate::url::ChosenStore;
use take::{check_value, take};
pub(crate) use take::{Holding, Kind};
use watch::Supervisor;

/// CMD and how to watch over it.
#[derive(Debug)]
struct Cmd<'a> {
    /// The program and its arguments.
    command: &'a [OsString],
    /// Variables added to CMD's environment.
    env: Vec<(&'static str, String)>,
    /// What a loss does to CMD.
    on_lost: OnLost,
    /// How long CMD may take to stop after SIGTERM on a loss.
    grace: Duration,
}

/// How CMD ended, and whether (why) what it ran under was lost meanwhile
/// (noticed while it ran, or only when giving it back).
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) status: ExitStatus,
    pub(crate) lost: Option<LossReason>,
}

/// The whole of `run` and `elect` but the exit code: checks `--value`
/// (empty if not given), takes `key` (a lock or an election, as `kind`
/// says) with `attempt` and that value within `--wait`, runs CMD while
/// holding it, gives it back. Returns how CMD ended.
pub(crate) async fn run_held<H, F>(
    store: &ChosenStore,
    key: &str,
    kind: Kind,
    value: Option<String>,
    on_lost: OnLost,
    args: &CmdArgs,
    attempt: impl FnOnce(Locker, LockOptions, String) -> F,
) -> Result<Ended, Failure>
where
    H: Holding,
    F: Future<Output = Result<H, LockError>>,
{
    let value = value.unwrap_or_default();
    check_value(&value)?;
    let mut signals = Signals::install()
        .map_err(|e| Failure::other(format!("cannot install signal handlers: {e}")))?;
    let attempt = |locker, options| attempt(locker, options, value);
    let (locker, held) = take(store, key, kind, args.wait, &mut signals, attempt).await?;
    let cmd = Cmd {
        command: &args.command,
        env: environment(&locker, held.guard(), kind),
        on_lost,
        grace: args.grace,
    };
    run_under(store, held, key, kind, cmd, &mut signals).await
}

/// Runs `cmd` while `held` is held, then gives `held` back; returns how CMD
/// ended. The subject of messages is `kind` and `key`.
async fn run_under<H: Holding>(
    store: &ChosenStore,
    held: H,
    key: &str,
    kind: Kind,
    cmd: Cmd<'_>,
    signals: &mut Signals,
) -> Result<Ended, Failure> {
    let subject = kind.subject(key);
    let job = match spawn(&cmd) {
        Ok(job) => job,
        Err(failure) => {
            give_back_quietly(store, held).await;
            return Err(failure);
        }
    };
    let program = cmd.command[0].to_string_lossy().into_owned();
    let supervisor = Supervisor {
        subject: &subject,
        program: &program,
        on_lost: cmd.on_lost,
        grace: cmd.grace,
    };
    let (status, lost) = match supervisor.watch(job, held.guard(), signals).await {
        Ok(ended) => ended,
        Err(error) => {
            give_back_quietly(store, held).await;
            return Err(Failure::other(format!("lost track of {program}: {error}")));
        }
    };
    // Always give it back; a loss found only now counts like one seen
    // earlier.
    let found_at_release = give_back(store, &subject, held).await;
    Ok(Ended {
        status,
        lost: lost.or(found_at_release),
    })
}

/// CMD's variables: DISTLOCK_KEY, DISTLOCK_TOKEN, DISTLOCK_OWNER and
/// DISTLOCK_NAMESPACE; for a leadership also DISTLOCK_TERM (the token).
fn environment(locker: &Locker, guard: &LockGuard, kind: Kind) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DISTLOCK_KEY", guard.key().to_owned()),
        ("DISTLOCK_TOKEN", guard.token().to_string()),
        ("DISTLOCK_OWNER", guard.owner().as_str().to_owned()),
        ("DISTLOCK_NAMESPACE", locker.namespace().as_str().to_owned()),
    ];
    if kind == Kind::Leadership {
        env.push(("DISTLOCK_TERM", guard.token().to_string()));
    }
    env
}

/// Starts CMD with its environment, as a [`Job`].
fn spawn(cmd: &Cmd<'_>) -> Result<Job, Failure> {
    let (program, args) = cmd
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("no command given after `--`"))?;
    let mut command = std::process::Command::new(program);
    command.args(args).envs(cmd.env.iter().map(|(k, v)| (k, v)));
    if cmd.on_lost == OnLost::Kill {
        // If distlock itself dies (SIGKILL, OOM), its lock goes with it;
        // under `kill` CMD must not carry on unprotected.
        signals::kill_with_parent(&mut command);
    }
    Job::start(command).map_err(|error| {
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

/// Gives `held` back after CMD ended. Returns the loss reason if that found
/// it already lost; other failures are warned about (the lock will expire,
/// or — for file locks — vanish with this process).
async fn give_back<H: Holding>(store: &ChosenStore, subject: &str, held: H) -> Option<LossReason> {
    let already_lost = !held.guard().is_held();
    match held.give_back().await {
        Ok(()) => None,
        Err(LockError::Lost { reason, .. }) => {
            if !already_lost {
                say(&format!(
                    "warning: {subject} was lost while the command ran ({reason})"
                ));
            }
            Some(reason)
        }
        Err(error) => {
            let failure = store.failure(error);
            say(&format!("warning: could not release {subject}: {failure}"));
            None
        }
    }
}

/// Gives `held` back on an error path, where the error already reported
/// matters more than how that went.
async fn give_back_quietly<H: Holding>(store: &ChosenStore, held: H) {
    if let Err(error) = held.give_back().await {
        tracing::debug!(error = %store.failure(error), "release after failed start");
    }
}
