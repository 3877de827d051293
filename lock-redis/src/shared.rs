//! Read locks and semaphores on one instance or a cluster.
//!
//! **Read locks** share the name's lock. The readers are the sorted set
//! `distlock:{<ns>:<key>}:readers` (owner id scored by the end of its
//! lease, on the server's clock, ms) with each reader's
//! `"<token> <owner>"` (then a newline and its value) in the hash
//! `…:readvalues`; both live as long as their longest lease. A read is
//! granted (token from the counter the name's exclusive holds draw from)
//! while the lock key is free and no live exclusive waiter stands in the
//! name's line before it; the exclusive acquire script counts live
//! readers as holders. Expired readers are swept by every script that
//! looks at them (`ZREMRANGEBYSCORE`). Waiters of both kinds share the
//! name's FIFO line; a reader's entry is marked `shared`. The release of
//! the last reader, or of an exclusive holder, lets in the line's front:
//! an exclusive waiter alone, or a reader and every reader right behind
//! it, each told on its backend's grant channel.
//!
//! **Semaphores** are separate objects with the same layout:
//! `…:permits` and `…:permitvalues`, the limit in `…:limit` (it expires
//! no sooner than the last live permit and is removed with the last one
//! given back), and a line of their own (`…:permitqueue`,
//! `…:permitwaiters`, each entry carrying the limit asked under); their
//! tokens come from the counter the name's lock draws from. A
//! permit is granted while fewer than the limit are held and no live
//! waiter stands before it; a request under a limit other than the one
//! live permits are held under fails with
//! [`LockError::LimitMismatch`]. A release lets in the line's front while
//! it fits, so one permit given back wakes one waiter.
//!
//! Read locks and permits are renewed one by one (`ZADD XX` with the new
//! lease end, owner-checked), not batched like exclusive locks.

use std::time::Duration;

use lock_core::backend::{HoldKind, Primitive};
use lock_core::{LockError, LockInfo, LockName};
use redis::Value;

use crate::conn::ScriptCall;
use crate::core::RedisCore;
use crate::keys::LockKeys;
use crate::scripts::scripts;
use crate::value::lock_info;

/// The sorted set and the values hash of a read lock's or a permit's
/// hold; `None` for an exclusive hold (the lock key).
pub(crate) fn hold_keys(keys: &LockKeys, kind: HoldKind) -> Option<[&str; 2]> {
    match kind {
        HoldKind::Shared => Some([keys.readers(), keys.read_values()]),
        HoldKind::Permit { .. } => Some([keys.permits(), keys.permit_values()]),
        _ => None,
    }
}

/// The limit argument of an acquire script: the limit for a permit, empty
/// (no argument) otherwise.
pub(crate) fn limit_arg(kind: HoldKind) -> String {
    match kind {
        HoldKind::Permit { limit } => limit.to_string(),
        _ => String::new(),
    }
}

/// Every live holder of `name`'s lock (its exclusive holder, or every
/// reader) or of its semaphore's permits, oldest first (by token).
pub(crate) async fn holders_of(
    core: &RedisCore,
    name: &LockName,
    primitive: Primitive,
) -> Result<Vec<LockInfo>, LockError> {
    let keys = core.keys(name);
    let (names, arg) = match primitive {
        Primitive::Lock => ([keys.lock(), keys.readers(), keys.read_values()], "lock"),
        Primitive::Semaphore => (
            [keys.limit(), keys.permits(), keys.permit_values()],
            "semaphore",
        ),
    };
    let reply: Value = core
        .conn
        .eval(
            core.timeouts,
            &ScriptCall::new("list holders", &scripts().holders, &names, &[&arg]).idempotent(),
        )
        .await?;
    Ok(parse_holders(reply))
}

/// Reads the reply of `scripts/holders.lua`: `{head, value, pttl, ...}`.
fn parse_holders(reply: Value) -> Vec<LockInfo> {
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    let mut items = items.into_iter();
    let head: String = items
        .next()
        .and_then(|head| redis::from_redis_value(head).ok())
        .unwrap_or_default();
    let kind = match head.as_str() {
        "exclusive" => HoldKind::Exclusive,
        "shared" => HoldKind::Shared,
        limit => HoldKind::Permit {
            limit: limit.parse().unwrap_or(0),
        },
    };
    let mut holders = Vec::new();
    while let (Some(value), Some(pttl)) = (items.next(), items.next()) {
        let (Ok(value), Ok(pttl)) = (
            redis::from_redis_value::<String>(value),
            redis::from_redis_value::<i64>(pttl),
        ) else {
            continue;
        };
        let ttl_left = u64::try_from(pttl).ok().map(Duration::from_millis);
        holders.push(lock_info(&value, ttl_left).with_kind(kind));
    }
    holders.sort_by_key(|holder| holder.token);
    holders
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_core::FencingToken;

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn holders_replies() {
        let exclusive = parse_holders(Value::Array(vec![
            text("exclusive"),
            text("4 me\nv"),
            Value::Int(900),
        ]));
        assert_eq!(exclusive.len(), 1);
        assert_eq!(exclusive[0].kind, HoldKind::Exclusive);
        assert_eq!(exclusive[0].value, "v");
        let readers = parse_holders(Value::Array(vec![
            text("shared"),
            text("9 b"),
            Value::Int(100),
            text("7 a"),
            Value::Int(200),
        ]));
        let tokens: Vec<_> = readers.iter().map(|h| (h.token, h.kind)).collect();
        assert_eq!(
            tokens,
            [
                (FencingToken::new(7), HoldKind::Shared),
                (FencingToken::new(9), HoldKind::Shared)
            ]
        );
        let permits = parse_holders(Value::Array(vec![text("3"), text("2 p"), Value::Int(5)]));
        assert_eq!(permits[0].kind, HoldKind::Permit { limit: 3 });
        assert!(parse_holders(Value::Array(vec![text("shared")])).is_empty());
        assert!(parse_holders(Value::Nil).is_empty());
    }
}
