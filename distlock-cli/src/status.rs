//! `distlock status KEY`: who holds a lock.

use std::time::Duration;

use distlock::{HoldKind, LockInfo};
use serde::Serialize;

use crate::cli::StatusArgs;
use crate::exit::{Failure, SUCCESS};
use crate::output;
use crate::url::ChosenStore;

/// The JSON shape of `status --json`; absent facts are `null`. `owner`,
/// `token`, `value` and `ttl_left_ms` are the first holder's; `holders`
/// lists every one (readers of a read lock, permit holders with
/// `--permits`). Without `--permits`, `permit_holders` lists the holders
/// of the semaphore of the same name (empty where the store has none).
/// `store` is the URL asked (password masked), `backend` its store.
#[derive(Debug, Serialize)]
struct StatusJson<'a> {
    key: &'a str,
    namespace: &'a str,
    store: &'a str,
    backend: &'a str,
    held: bool,
    owner: Option<&'a str>,
    token: Option<u64>,
    value: Option<&'a str>,
    ttl_left_ms: Option<u64>,
    /// `exclusive`, `shared` or `permit`; `null` when free.
    kind: Option<&'static str>,
    holders: Vec<HolderJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    permit_holders: Option<Vec<HolderJson<'a>>>,
}

/// One holder in `status --json`.
#[derive(Debug, Serialize)]
struct HolderJson<'a> {
    owner: &'a str,
    token: u64,
    value: &'a str,
    ttl_left_ms: Option<u64>,
    kind: &'static str,
}

impl<'a> HolderJson<'a> {
    fn new(holder: &'a LockInfo) -> Self {
        Self {
            owner: &holder.owner,
            token: holder.token.get(),
            value: &holder.value,
            ttl_left_ms: holder
                .ttl_left
                .map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            kind: holder.kind.as_str(),
        }
    }
}

/// Prints whether `KEY` is held and by whom (every reader of a read lock;
/// with `--permits`, every permit holder of the semaphore KEY), and, when
/// its semaphore's permits are held too, those; then which store it
/// asked. Exits 0 either way: a held lock is an answer, not an error.
pub(crate) async fn status(store: &ChosenStore, args: StatusArgs) -> Result<i32, Failure> {
    let locker = store.connect().await?;
    let failure = |error| store.failure(error);
    let (holders, permits) = if args.permits {
        (
            locker.permit_holders(&args.key).await.map_err(failure)?,
            None,
        )
    } else {
        let holders = locker.holders(&args.key).await.map_err(failure)?;
        let permits = if locker.capabilities().semaphores {
            Some(locker.permit_holders(&args.key).await.map_err(failure)?)
        } else {
            None
        };
        (holders, permits)
    };
    let text = if args.json {
        let listed: Vec<_> = holders.iter().map(HolderJson::new).collect();
        let first = listed.first();
        let json = StatusJson {
            key: &args.key,
            namespace: locker.namespace().as_str(),
            store: store.shown(),
            backend: locker.backend_name(),
            held: first.is_some(),
            owner: first.map(|h| h.owner),
            token: first.map(|h| h.token),
            value: first.map(|h| h.value),
            ttl_left_ms: first.and_then(|h| h.ttl_left_ms),
            kind: first.map(|h| h.kind),
            holders: listed,
            permit_holders: permits
                .as_ref()
                .map(|p| p.iter().map(HolderJson::new).collect()),
        };
        serde_json::to_string(&json).map_err(|e| Failure::other(e.to_string()))?
    } else {
        let mut text = describe(&args.key, &holders);
        if let Some(permits) = permits.as_deref().filter(|p| !p.is_empty()) {
            text.push('\n');
            text.push_str(&describe(&format!("{} (semaphore)", args.key), permits));
        }
        text.push_str(&format!(
            "\nasked {} store {}, namespace {}",
            locker.backend_name(),
            store.described(),
            locker.namespace()
        ));
        text
    };
    output::line(&text)?;
    Ok(SUCCESS)
}

/// `KEY: free`; `KEY: held by OWNER, token T, value "V", ttl left 2.3s`
/// (the value, if not empty, quoted with escapes so that it stays one
/// line); for readers and permits, a count and then one such line per
/// holder.
fn describe(key: &str, holders: &[LockInfo]) -> String {
    match holders {
        [] => format!("{key}: free"),
        [one] if one.kind == HoldKind::Exclusive => format!("{key}: held by {}", details(one)),
        many => {
            let mut text = match many[0].kind {
                HoldKind::Permit { limit } if limit > 0 => {
                    format!("{key}: {} of {limit} permits held", many.len())
                }
                HoldKind::Permit { .. } => format!("{key}: {} permits held", many.len()),
                _ => format!("{key}: read by {}", plural(many.len(), "reader")),
            };
            for holder in many {
                text.push_str(&format!("\n  {}", details(holder)));
            }
            text
        }
    }
}

/// `OWNER, token T[, value "V"][, ttl left 2.3s]`.
fn details(holder: &LockInfo) -> String {
    let mut text = format!("{}, token {}", holder.owner, holder.token);
    if !holder.value.is_empty() {
        text.push_str(&format!(", value {:?}", holder.value));
    }
    if let Some(ttl) = holder.ttl_left {
        text.push_str(&format!(", ttl left {}", seconds(ttl)));
    }
    text
}

fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::FencingToken;

    #[test]
    fn free_and_held_read_as_documented() {
        assert_eq!(describe("jobs/a", &[]), "jobs/a: free");
        let with_ttl = LockInfo::new(
            "h/1/x",
            FencingToken::new(7),
            Some(Duration::from_millis(2345)),
        );
        assert_eq!(
            describe("jobs/a", std::slice::from_ref(&with_ttl)),
            "jobs/a: held by h/1/x, token 7, ttl left 2.3s"
        );
        let without_ttl = LockInfo::new("h/1/x", FencingToken::new(7), None);
        assert_eq!(describe("k", &[without_ttl]), "k: held by h/1/x, token 7");
        let with_value = with_ttl.with_value("10.0.0.7:80");
        assert_eq!(
            describe("k", &[with_value]),
            r#"k: held by h/1/x, token 7, value "10.0.0.7:80", ttl left 2.3s"#
        );
    }

    #[test]
    fn readers_and_permits_are_listed_one_per_line() {
        let reader = |token| {
            LockInfo::new("h/1/r", FencingToken::new(token), None).with_kind(HoldKind::Shared)
        };
        assert_eq!(
            describe("cfg", &[reader(3)]),
            "cfg: read by 1 reader\n  h/1/r, token 3"
        );
        assert_eq!(
            describe("cfg", &[reader(3), reader(4).with_value("v")]),
            "cfg: read by 2 readers\n  h/1/r, token 3\n  h/1/r, token 4, value \"v\""
        );
        let permit = LockInfo::new("h/1/p", FencingToken::new(9), None)
            .with_kind(HoldKind::Permit { limit: 3 });
        assert_eq!(
            describe("pool", &[permit]),
            "pool: 1 of 3 permits held\n  h/1/p, token 9"
        );
    }
}
