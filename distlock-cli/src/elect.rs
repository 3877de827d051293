//! `distlock elect NAME -- CMD`: run a command only while leading an
//! election.
//!
//! An election is the lock of the same name whose holder is the leader, so
//! `elect` is `run` with a value and a term: it campaigns (waiting its turn
//! in the store's queue order, up to `--wait`), runs CMD as leader with
//! `run`'s environment plus DISTLOCK_TERM, and resigns when CMD exits.
//! Unlike `run`, a leadership lost while CMD ran always ends in exit code
//! 76: with `--on-lost ignore` CMD may finish, but not all its work was
//! done as leader.

use crate::cli::ElectArgs;
use crate::exit::{Failure, LOST};
use crate::signals;
use crate::supervise::{self, Kind};
use crate::url::ChosenStore;

/// Campaigns, runs CMD as leader, resigns; returns the exit code.
pub(crate) async fn elect(store: &ChosenStore, args: ElectArgs) -> Result<i32, Failure> {
    let name = &args.name;
    let ended = supervise::run_held(
        store,
        name,
        Kind::Leadership,
        args.value,
        args.on_lost,
        &args.cmd,
        |locker, options, value| async move {
            let election = locker.election(name)?;
            election.campaign_with(value, options).await
        },
    )
    .await?;
    Ok(match ended.lost {
        Some(_) => LOST,
        None => signals::exit_code(ended.status),
    })
}
