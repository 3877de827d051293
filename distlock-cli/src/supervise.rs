//! Running CMD under something held — a lock (`run`) or a leadership
//! (`elect`): taking it within `--wait`, starting CMD with its details in
//! the environment, forwarding signals, enforcing the loss policy, and
//! giving it back when CMD exits.
//!
//! CMD stays in distlock's process group, so a Ctrl-C at the terminal
//! reaches both; signals sent to distlock alone (`kill PID`, a service
//! manager) are forwarded. Either way distlock outlives CMD, gives back
//! what it held, and exits with CMD's code (or 76 after a loss, see the
//! callers). On Linux, under `--on-lost kill`, CMD is also SIGKILLed if
//! distlock dies without a chance to act (SIGKILL, OOM killer): the lock
//! dies with distlock, and CMD must not outlive it.

use std::ffi::OsString;
use std::future::Future;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{Leadership, LockError, LockGuard, LockOptions, Locker, LossReason, MAX_VALUE_LEN};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::cli::{CmdArgs, OnLost, Wait};
use crate::exit::{Failure, CANNOT_EXECUTE, NOT_FOUND, SIGNAL_BASE, TEMPFAIL};
use crate::output::say;
use crate::signals::{self, Signals};
use crate::url::StoreUrl;

/// How long distlock asks the store who holds a lock it timed out on,
/// before giving up on naming the holder.
const INSPECT_LIMIT: Duration = Duration::from_secs(2);

/// What CMD runs under, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A lock taken by `run`.
    Lock,
    /// A read lock taken by `run --shared`.
    ReadLock,
    /// One of a semaphore's permits, taken by `run --permits N`.
    Permit(u32),
    /// The leadership of an election, won by `elect`.
    Leadership,
}

impl Kind {
    /// `lock "k"` or `leadership of "k"`.
    pub(crate) fn subject(self, key: &str) -> String {
        match self {
            Self::Lock => format!("lock {key:?}"),
            Self::ReadLock => format!("read lock of {key:?}"),
            Self::Permit(limit) => format!("a permit of {key:?} (of {limit})"),
            Self::Leadership => format!("leadership of {key:?}"),
        }
    }
}

/// Something CMD runs under and that is given back when CMD exits.
pub(crate) trait Holding {
    /// The lock guard behind it (its token, owner, lost signal).
    fn guard(&self) -> &LockGuard;
    /// Releases the lock or resigns the leadership.
    async fn give_back(self) -> Result<(), LockError>;
}

impl Holding for LockGuard {
    fn guard(&self) -> &LockGuard {
        self
    }

    async fn give_back(self) -> Result<(), LockError> {
        self.release().await
    }
}

impl Holding for Leadership {
    fn guard(&self) -> &LockGuard {
        Leadership::guard(self)
    }

    async fn give_back(self) -> Result<(), LockError> {
        self.resign().await
    }
}

/// Checks `--value` before anything is sent: a value over the store's
/// limit is bad usage, reported without echoing the value.
fn check_value(value: &str) -> Result<(), Failure> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Failure::usage(format!(
            "--value is {} bytes long; the limit is {MAX_VALUE_LEN} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// Connects and takes what CMD will run under with `attempt`, which gets
/// the locker and the lock options for `wait`. A signal meanwhile cancels
/// both (lock-core's acquisition is cancel-safe) and ends distlock like
/// the signal would. On a timeout the failure (exit 75) names the holder.
async fn take<T, F>(
    store: &StoreUrl,
    key: &str,
    kind: Kind,
    wait: Option<Wait>,
    signals: &mut Signals,
    attempt: impl FnOnce(Locker, LockOptions) -> F,
) -> Result<(Locker, T), Failure>
where
    F: Future<Output = Result<T, LockError>>,
{
    let options = match wait {
        None => LockOptions::new(),
        Some(Wait::Forever) => LockOptions::new().wait_forever(),
        Some(Wait::For(wait)) => LockOptions::new().wait(wait),
    };
    let taking = async {
        let locker = store.connect().await?;
        match attempt(locker.clone(), options).await {
            Ok(taken) => Ok((locker, taken)),
            Err(LockError::Timeout { waited, .. }) => {
                let wait = match wait {
                    Some(Wait::For(wait)) => wait,
                    _ => locker.options().wait.unwrap_or(waited),
                };
                Err(timed_out(store, &locker, key, kind, wait).await)
            }
            Err(error) => Err(store.failure(error)),
        }
    };
    tokio::select! {
        taken = taking => taken,
        signal = signals.recv() => Err(Failure::new(
            SIGNAL_BASE + signal,
            format!(
                "{} received while waiting for {}",
                signals::name(signal),
                kind.subject(key)
            ),
        )),
    }
}

/// The exit-75 failure: `lock "KEY" is held by OWNER (token T); gave up
/// after 2s`, or `election "NAME" is led by OWNER (term T); ...`.
async fn timed_out(
    store: &StoreUrl,
    locker: &Locker,
    key: &str,
    kind: Kind,
    wait: Duration,
) -> Failure {
    let (what, held, number) = match kind {
        Kind::Lock | Kind::ReadLock => ("lock", "held", "token"),
        Kind::Permit(_) => ("semaphore", "held", "token"),
        Kind::Leadership => ("election", "led", "term"),
    };
    let holder = match kind {
        Kind::Permit(limit) => format!("has all {limit} permits held"),
        _ => match tokio::time::timeout(INSPECT_LIMIT, locker.inspect(key)).await {
            Ok(Ok(Some(info))) => format!("is {held} by {} ({number} {})", info.owner, info.token),
            Ok(Ok(None)) => format!("was {held} until just now"),
            Ok(Err(_)) | Err(_) => format!("is {held}"),
        },
    };
    let gave_up = if wait.is_zero() {
        "gave up at once (--wait 0)".to_owned()
    } else {
        format!("gave up after {}", humantime::format_duration(wait))
    };
    Failure::new(
        TEMPFAIL,
        store.scrub(&format!("{what} {key:?} {holder}; {gave_up}")),
    )
}

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
    store: &StoreUrl,
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
    store: &StoreUrl,
    held: H,
    key: &str,
    kind: Kind,
    cmd: Cmd<'_>,
    signals: &mut Signals,
) -> Result<Ended, Failure> {
    let subject = kind.subject(key);
    let child = match spawn(&cmd) {
        Ok(child) => child,
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
    let (status, lost) = match supervisor.watch(child, held.guard(), signals).await {
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

/// Starts CMD with its environment.
fn spawn(cmd: &Cmd<'_>) -> Result<Child, Failure> {
    let (program, args) = cmd
        .command
        .split_first()
        .ok_or_else(|| Failure::usage("no command given after `--`"))?;
    let mut command = Command::new(program);
    command.args(args).envs(cmd.env.iter().map(|(k, v)| (k, v)));
    if cmd.on_lost == OnLost::Kill {
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
    subject: &'a str,
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
                    "{} lost ({reason}); stopping {}",
                    self.subject, self.program
                ));
                if let Some(pid) = pid {
                    signals::send(pid, libc::SIGTERM);
                }
            }
            OnLost::Ignore => say(&format!(
                "warning: {} lost ({reason}); {} keeps running (--on-lost ignore)",
                self.subject, self.program
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

/// Gives `held` back after CMD ended. Returns the loss reason if that found
/// it already lost; other failures are warned about (the lock will expire,
/// or — for file locks — vanish with this process).
async fn give_back<H: Holding>(store: &StoreUrl, subject: &str, held: H) -> Option<LossReason> {
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
async fn give_back_quietly<H: Holding>(store: &StoreUrl, held: H) {
    if let Err(error) = held.give_back().await {
        tracing::debug!(error = %store.failure(error), "release after failed start");
    }
}
