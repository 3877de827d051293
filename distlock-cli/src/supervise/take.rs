//! Taking what CMD will run under: connecting, the lock or leadership
//! within `--wait`, and the exit-75 failure that names the holder.

use std::future::Future;
use std::time::Duration;

use distlock::{Leadership, LockError, LockGuard, LockOptions, Locker, MAX_VALUE_LEN};

use crate::cli::Wait;
use crate::exit::{Failure, SIGNAL_BASE, TEMPFAIL};
use crate::signals::{self, Signals};
use crate::url::ChosenStore;

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
pub(super) fn check_value(value: &str) -> Result<(), Failure> {
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
pub(super) async fn take<T, F>(
    store: &ChosenStore,
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
    store: &ChosenStore,
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
