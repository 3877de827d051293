//! `distlock run KEY -- CMD`: hold a lock (`--shared`: a read lock;
//! `--permits N`: one of N permits) while a command runs.
//!
//! Loss policy: with `--on-lost kill` a lock known lost at any time while
//! CMD ran — noticed while it ran, or only when the release finds the lock
//! gone — ends in exit code 76, even if CMD succeeded, because CMD's work
//! may have overlapped with another holder's. With `--on-lost ignore` CMD
//! finishes and its code is distlock's. How the lock is taken and CMD
//! started and watched is shared with `elect`, see
//! [`crate::supervise`].

use crate::cli::{OnLost, RunArgs};
use crate::exit::{Failure, LOST};
use crate::signals;
use crate::supervise::{self, Kind};
use crate::url::ChosenStore;

/// Takes the lock, runs CMD under it, releases it; returns the exit code.
pub(crate) async fn run(store: &ChosenStore, args: RunArgs) -> Result<i32, Failure> {
    let key = &args.key;
    let kind = match (args.shared, args.permits) {
        (true, _) => Kind::ReadLock,
        (false, Some(limit)) => Kind::Permit(limit),
        (false, None) => Kind::Lock,
    };
    let ended = supervise::run_held(
        store,
        key,
        kind,
        args.value,
        args.on_lost,
        &args.cmd,
        |locker, options, value| async move {
            let options = options.value(value);
            match kind {
                Kind::ReadLock => locker.rwlock(key)?.read_with(options).await,
                Kind::Permit(limit) => locker.semaphore(key, limit)?.acquire_with(options).await,
                _ => locker.lock_with(key, options).await,
            }
        },
    )
    .await?;
    Ok(match (ended.lost, args.on_lost) {
        (Some(_), OnLost::Kill) => LOST,
        _ => signals::exit_code(ended.status),
    })
}
