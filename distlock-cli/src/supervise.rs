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

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{Leadership, LockError, LockGuard, LockOptions, Locker, LossReason, MAX_VALUE_LEN};
use tokio::time::Instant;

use crate::cli::{CmdArgs, OnLost, Wait};
use crate::exit::{Failure, CANNOT_EXECUTE, NOT_FOUND, SIGNAL_BASE, TEMPFAIL};
use crate::job::{Change, Job};
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

/// Watches CMD's job: passes signals on, enforces the loss policy, and
/// waits until the whole job is gone.
struct Supervisor<'a> {
    subject: &'a str,
    program: &'a str,
    on_lost: OnLost,
    grace: Duration,
}

impl Supervisor<'_> {
    /// Waits until nothing of the job is left; returns how CMD ended and
    /// whether (why) the lock was lost meanwhile. A signal to distlock is
    /// passed to the whole job, a loss (under `kill`) sends it SIGTERM;
    /// either way what is left of the job after the grace period gets
    /// SIGKILL.
    async fn watch(
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
