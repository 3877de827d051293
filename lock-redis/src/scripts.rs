//! The Lua scripts, and what their replies mean.
//!
//! Each script is a file of its own under `scripts/`, whose header names
//! its KEYS, ARGV and reply and shows how to run it with
//! `redis-cli --eval`. The helpers they share (`owner_of`, `token_of`,
//! `now_ms`) are defined once, in `scripts/common.lua`, which is put in
//! front of every script when its [`Script`] is built (so the hash Redis
//! knows a script by is that of the two files together).
//!
//! A lock's value is `"<token> <owner>"`, followed by `"\n<value>"` when
//! the holder stores a value (see [`value`](crate::value)), so `inspect`
//! returns all three and every owner check compares the part between the
//! first space and the first newline (owner ids are unique per
//! acquisition and contain no newline). Scripts run by EVALSHA;
//! `redis::Script` falls back to EVAL (which loads the script) on
//! NOSCRIPT, e.g. after a server restart.

use std::sync::OnceLock;
use std::time::Duration;

use lock_core::FencingToken;
use redis::{Script, Value};

/// The helpers every script may use; see `scripts/common.lua`.
const COMMON: &str = include_str!("scripts/common.lua");

/// Takes a lock or queues for it; see `scripts/acquire.lua`. Redlock
/// calls it with two keys and no mode: it never queues.
const ACQUIRE: &str = include_str!("scripts/acquire.lua");

/// Renews many locks in one call; see `scripts/renew_many.lua`.
const RENEW_MANY: &str = include_str!("scripts/renew_many.lua");

/// Owner-checked release with hand-off to the next live waiter (or, for a
/// waiter that gives up, leaving the queue first; or, forced, whoever
/// holds the lock); see `scripts/release_queued.lua`.
const RELEASE_QUEUED: &str = include_str!("scripts/release_queued.lua");

/// Redlock: owner-checked delete, announced; see `scripts/release.lua`.
const RELEASE: &str = include_str!("scripts/release.lua");

/// Redlock: delete whoever holds the lock, announced; see
/// `scripts/force_release.lua`.
const FORCE_RELEASE: &str = include_str!("scripts/force_release.lua");

/// The lock value and its PTTL; see `scripts/inspect.lua`.
const INSPECT: &str = include_str!("scripts/inspect.lua");

/// Redlock: raises the counter and stamps the token; see
/// `scripts/raise.lua`.
const RAISE: &str = include_str!("scripts/raise.lua");

/// Owner-checked replacement of the holder's value, announced; see
/// `scripts/set_value.lua`.
const SET_VALUE: &str = include_str!("scripts/set_value.lua");

/// Marks a lock as watched and reads it; see `scripts/watch_read.lua`.
const WATCH_READ: &str = include_str!("scripts/watch_read.lua");

/// Takes a read lock or queues for it; see `scripts/acquire_read.lua`.
const ACQUIRE_READ: &str = include_str!("scripts/acquire_read.lua");

/// Takes a semaphore's permit or queues for one; see
/// `scripts/acquire_permit.lua`.
const ACQUIRE_PERMIT: &str = include_str!("scripts/acquire_permit.lua");

/// Gives a permit back and lets waiters in; see
/// `scripts/release_permit.lua`.
const RELEASE_PERMIT: &str = include_str!("scripts/release_permit.lua");

/// Renews a read lock or a permit; see `scripts/renew_hold.lua`.
const RENEW_HOLD: &str = include_str!("scripts/renew_hold.lua");

/// Replaces a read lock's or a permit's value; see
/// `scripts/set_hold_value.lua`.
const SET_HOLD_VALUE: &str = include_str!("scripts/set_hold_value.lua");

/// Every holder of a lock or a semaphore; see `scripts/holders.lua`.
const HOLDERS: &str = include_str!("scripts/holders.lua");

/// The scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew_many: Script,
    pub(crate) release_queued: Script,
    pub(crate) release: Script,
    pub(crate) force_release: Script,
    pub(crate) inspect: Script,
    pub(crate) raise: Script,
    pub(crate) set_value: Script,
    pub(crate) watch_read: Script,
    pub(crate) acquire_read: Script,
    pub(crate) acquire_permit: Script,
    pub(crate) release_permit: Script,
    pub(crate) renew_hold: Script,
    pub(crate) set_hold_value: Script,
    pub(crate) holders: Script,
}

/// The process-wide scripts.
pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: with_common(ACQUIRE),
        renew_many: with_common(RENEW_MANY),
        release_queued: with_common(RELEASE_QUEUED),
        release: with_common(RELEASE),
        force_release: with_common(FORCE_RELEASE),
        inspect: with_common(INSPECT),
        raise: with_common(RAISE),
        set_value: with_common(SET_VALUE),
        watch_read: with_common(WATCH_READ),
        acquire_read: with_common(ACQUIRE_READ),
        acquire_permit: with_common(ACQUIRE_PERMIT),
        release_permit: with_common(RELEASE_PERMIT),
        renew_hold: with_common(RENEW_HOLD),
        set_hold_value: with_common(SET_HOLD_VALUE),
        holders: with_common(HOLDERS),
    })
}

/// The script `body` with the shared helpers of [`COMMON`] in front.
fn with_common(body: &str) -> Script {
    Script::new(&source(body))
}

/// The text Redis runs for `body`: [`COMMON`], then `body`.
fn source(body: &str) -> String {
    format!("{COMMON}\n{body}")
}

impl Scripts {
    /// Every script, for loading them ahead of use.
    pub(crate) fn all(&self) -> [&Script; 15] {
        [
            &self.acquire,
            &self.renew_many,
            &self.release_queued,
            &self.release,
            &self.force_release,
            &self.inspect,
            &self.raise,
            &self.set_value,
            &self.watch_read,
            &self.acquire_read,
            &self.acquire_permit,
            &self.release_permit,
            &self.renew_hold,
            &self.set_hold_value,
            &self.holders,
        ]
    }
}

/// The reply of [`ACQUIRE`], [`ACQUIRE_READ`] and [`ACQUIRE_PERMIT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Ours, with this token.
    Acquired(FencingToken),
    /// Held by someone else.
    Held {
        /// For this long (`None`: no expiry set).
        pttl: Option<Duration>,
        /// With this token (0 for a value distlock did not write).
        holder: FencingToken,
    },
}

impl AcquireReply {
    /// Reads `{1, token}` or `{0, pttl[, holder's token]}`.
    pub(crate) fn parse(reply: &[i64]) -> Self {
        let at = |i: usize| reply.get(i).copied().unwrap_or(0);
        match at(0) {
            1 => Self::Acquired(FencingToken::new(at(1).max(0) as u64)),
            _ => Self::Held {
                pttl: u64::try_from(at(1)).ok().map(Duration::from_millis),
                holder: FencingToken::new(at(2).max(0) as u64),
            },
        }
    }
}

/// The limit in an [`ACQUIRE_PERMIT`] reply `{2, stored limit}`: permits
/// are held under another limit. `None` for any other reply.
pub(crate) fn limit_mismatch(reply: &[i64]) -> Option<u32> {
    match reply {
        [2, stored, ..] => u32::try_from(*stored).ok(),
        _ => None,
    }
}

/// The reply of [`INSPECT`]: the lock value and its PTTL.
pub(crate) fn parse_inspect(reply: Value) -> Option<(String, Option<Duration>)> {
    match reply {
        Value::Array(items) if items.len() == 2 => {
            let value: String = redis::from_redis_value(items[0].clone()).ok()?;
            let pttl: i64 = redis::from_redis_value(items[1].clone()).ok()?;
            Some((value, u64::try_from(pttl).ok().map(Duration::from_millis)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies() {
        assert_eq!(
            AcquireReply::parse(&[1, 7]),
            AcquireReply::Acquired(FencingToken::new(7))
        );
        assert_eq!(
            AcquireReply::parse(&[0, 1500, 9]),
            AcquireReply::Held {
                pttl: Some(Duration::from_millis(1500)),
                holder: FencingToken::new(9)
            }
        );
        assert_eq!(
            AcquireReply::parse(&[0, -1]),
            AcquireReply::Held {
                pttl: None,
                holder: FencingToken::new(0)
            }
        );
    }

    #[test]
    fn limit_mismatch_replies() {
        assert_eq!(limit_mismatch(&[2, 3]), Some(3));
        assert_eq!(limit_mismatch(&[1, 3]), None);
        assert_eq!(limit_mismatch(&[0, 100, 0]), None);
    }

    /// Every script, as its file has it.
    const BODIES: [&str; 15] = [
        ACQUIRE,
        RENEW_MANY,
        RELEASE_QUEUED,
        RELEASE,
        FORCE_RELEASE,
        INSPECT,
        RAISE,
        SET_VALUE,
        WATCH_READ,
        ACQUIRE_READ,
        ACQUIRE_PERMIT,
        RELEASE_PERMIT,
        RENEW_HOLD,
        SET_HOLD_VALUE,
        HOLDERS,
    ];

    #[test]
    fn the_helpers_are_defined_once_in_front_of_every_script() {
        for helper in [
            "owner_of",
            "token_of",
            "now_ms",
            "queue_entry",
            "parse_entry",
            "join_line",
            "waiter_ahead",
            "keep_for",
            "set_limit",
            "sweep",
            "add_hold",
            "renew_hold",
        ] {
            let definition = format!("local function {helper}(");
            assert!(COMMON.contains(&definition), "{helper} missing");
            for body in BODIES {
                assert!(!body.contains(&definition), "{helper} again");
                let text = source(body);
                assert!(text.starts_with(COMMON) && text.ends_with(body));
            }
        }
    }

    #[test]
    fn the_scripts_are_built_from_their_source() {
        let scripts = scripts();
        for (script, body) in scripts.all().into_iter().zip(BODIES) {
            assert_eq!(script.get_hash(), Script::new(&source(body)).get_hash());
        }
    }

    #[test]
    fn every_script_names_its_keys_argv_and_reply() {
        for script in BODIES {
            let header: Vec<&str> = script.lines().take_while(|l| l.starts_with("--")).collect();
            for part in [
                "-- KEYS",
                "-- ARGV",
                "-- Reply:",
                "-- redis-cli --eval <(cat common.lua ",
            ] {
                assert!(
                    header.iter().any(|line| line.starts_with(part)),
                    "{part} missing in {}",
                    header[0]
                );
            }
        }
    }
}
