//! `distlock leader NAME [--watch] [--json]`: who leads an election, once
//! or as it changes.

use distlock::LeaderInfo;
use serde::Serialize;

use crate::cli::LeaderArgs;
use crate::exit::{Failure, SUCCESS};
use crate::output;
use crate::signals::Signals;
use crate::url::ChosenStore;

/// The JSON shape of `leader --json`, one object per line; `value`, `term`
/// and `owner` are `null` when nobody leads.
#[derive(Debug, Serialize)]
struct LeaderJson<'a> {
    name: &'a str,
    value: Option<&'a str>,
    term: Option<u64>,
    owner: Option<&'a str>,
}

/// Prints the leader of `NAME`; with `--watch`, then each change the
/// observer reports (see `Election::observe`) until a signal. Exits 0 whether or not someone leads: no leader is an answer,
/// as a free lock is for `status`.
pub(crate) async fn leader(store: &ChosenStore, args: LeaderArgs) -> Result<i32, Failure> {
    if !args.watch {
        let locker = store.connect().await?;
        let election = locker
            .election(&args.name)
            .map_err(|error| store.failure(error))?;
        let leader = election
            .leader()
            .await
            .map_err(|error| store.failure(error))?;
        print(&args, leader.as_ref())?;
        return Ok(SUCCESS);
    }
    // Installed first: an interrupt at any point ends the watch with 0.
    let mut signals = Signals::install()
        .map_err(|e| Failure::other(format!("cannot install signal handlers: {e}")))?;
    tokio::select! {
        failed = watch(store, &args) => failed.map(|never| match never {}),
        _ = signals.recv() => Ok(SUCCESS),
    }
}

/// Prints the leader now and as the observer reports changes; returns only
/// on failure.
async fn watch(
    store: &ChosenStore,
    args: &LeaderArgs,
) -> Result<std::convert::Infallible, Failure> {
    let locker = store.connect().await?;
    let election = locker
        .election(&args.name)
        .map_err(|error| store.failure(error))?;
    let mut leaders = election.observe();
    loop {
        let leader = leaders.changed().await;
        print(args, leader.as_ref())?;
    }
}

/// Writes one line about `leader`, as text or JSON.
fn print(args: &LeaderArgs, leader: Option<&LeaderInfo>) -> Result<(), Failure> {
    let text = if args.json {
        let json = LeaderJson {
            name: &args.name,
            value: leader.map(|l| l.value.as_str()),
            term: leader.map(|l| l.term.get()),
            owner: leader.map(|l| l.owner.as_str()),
        };
        serde_json::to_string(&json).map_err(|e| Failure::other(e.to_string()))?
    } else {
        describe(&args.name, leader)
    };
    output::line(&text)
}

/// `NAME: no leader`, or `NAME: led by OWNER, term T, value "V"` (the
/// value quoted with escapes, so that it stays one line).
fn describe(name: &str, leader: Option<&LeaderInfo>) -> String {
    match leader {
        None => format!("{name}: no leader"),
        Some(leader) => format!(
            "{name}: led by {}, term {}, value {:?}",
            leader.owner, leader.term, leader.value
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::{FencingToken, LockInfo};

    fn leader(value: &str) -> LeaderInfo {
        LeaderInfo::from(LockInfo::new("h/1/x", FencingToken::new(7), None).with_value(value))
    }

    #[test]
    fn text_reads_as_documented() {
        assert_eq!(describe("sched", None), "sched: no leader");
        assert_eq!(
            describe("sched", Some(&leader("10.0.0.7:80"))),
            r#"sched: led by h/1/x, term 7, value "10.0.0.7:80""#
        );
        assert_eq!(
            describe("sched", Some(&leader("a\nb"))),
            r#"sched: led by h/1/x, term 7, value "a\nb""#
        );
    }

    #[test]
    fn json_has_exactly_the_four_fields() {
        let none = LeaderJson {
            name: "s",
            value: None,
            term: None,
            owner: None,
        };
        assert_eq!(
            serde_json::to_string(&none).unwrap(),
            r#"{"name":"s","value":null,"term":null,"owner":null}"#
        );
        let info = leader("v");
        let some = LeaderJson {
            name: "s",
            value: Some(&info.value),
            term: Some(info.term.get()),
            owner: Some(&info.owner),
        };
        assert_eq!(
            serde_json::to_string(&some).unwrap(),
            r#"{"name":"s","value":"v","term":7,"owner":"h/1/x"}"#
        );
    }
}
