//! The Lua scripts, and what their replies mean.
//!
//! Each script is a file of its own under `scripts/`, whose header names
//! its KEYS, ARGV and reply and shows how to run it with
//! `redis-cli --eval`. The files are self-contained: the few helpers they
//! share (`owner_of`, `now_ms`) are repeated in each file that
//! needs them, and a test keeps the copies identical.
//!
//! A lock's value is `"<token> <owner>"`, so `inspect` returns both and
//! every owner check compares the part after the first space (owner ids
//! are unique per acquisition). Scripts run by EVALSHA; `redis::Script`
//! falls back to EVAL (which loads the script) on NOSCRIPT, e.g. after a
//! server restart.

use std::sync::OnceLock;
use std::time::Duration;

use lock_core::FencingToken;
use redis::{Script, Value};

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
}

/// The process-wide scripts.
pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::new(ACQUIRE),
        renew_many: Script::new(RENEW_MANY),
        release_queued: Script::new(RELEASE_QUEUED),
        release: Script::new(RELEASE),
        force_release: Script::new(FORCE_RELEASE),
        inspect: Script::new(INSPECT),
        raise: Script::new(RAISE),
    })
}

impl Scripts {
    /// Every script, for loading them ahead of use.
    pub(crate) fn all(&self) -> [&Script; 7] {
        [
            &self.acquire,
            &self.renew_many,
            &self.release_queued,
            &self.release,
            &self.force_release,
            &self.inspect,
            &self.raise,
        ]
    }
}

/// The reply of [`ACQUIRE`].
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

/// The lock value `"<token> <owner>"`.
#[cfg(test)]
pub(crate) fn lock_value(token: FencingToken, owner: &str) -> String {
    format!("{} {owner}", token.get())
}

/// Splits a lock value into token and owner; `None` for a value distlock
/// did not write.
pub(crate) fn parse_lock_value(value: &str) -> Option<(FencingToken, &str)> {
    let (token, owner) = value.split_once(' ')?;
    Some((FencingToken::new(token.parse().ok()?), owner))
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
    fn lock_values_round_trip() {
        let value = lock_value(FencingToken::new(42), "host/12/abc def");
        assert_eq!(value, "42 host/12/abc def");
        assert_eq!(
            parse_lock_value(&value),
            Some((FencingToken::new(42), "host/12/abc def"))
        );
        assert_eq!(parse_lock_value("no-token"), None);
        assert_eq!(parse_lock_value("x owner"), None);
    }

    #[test]
    fn every_owner_checking_script_defines_the_helper() {
        for script in [ACQUIRE, RENEW_MANY, RELEASE_QUEUED, RELEASE, RAISE] {
            assert!(script.contains(OWNER_OF));
        }
    }

    /// `owner_of` as every script that checks owners defines it.
    const OWNER_OF: &str = "local function owner_of(v)
  local i = v and string.find(v, ' ', 1, true)
  return i and string.sub(v, i + 1) or nil
end
";

    /// The lines from `from` up to the first line that starts with `end`
    /// after it.
    fn function_text<'a>(script: &'a str, from: &str) -> &'a str {
        let start = script.find(from).expect(from);
        let rest = &script[start..];
        let end = rest.find("\nend\n").expect("end of function") + "\nend\n".len();
        &rest[..end]
    }

    #[test]
    fn acquire_and_release_read_the_clock_alike() {
        assert_eq!(
            function_text(ACQUIRE, "local function now_ms"),
            function_text(RELEASE_QUEUED, "local function now_ms")
        );
    }

    #[test]
    fn every_script_names_its_keys_argv_and_reply() {
        for script in [
            ACQUIRE,
            RENEW_MANY,
            RELEASE_QUEUED,
            RELEASE,
            FORCE_RELEASE,
            INSPECT,
            RAISE,
        ] {
            let header: Vec<&str> = script.lines().take_while(|l| l.starts_with("--")).collect();
            for part in ["-- KEYS", "-- ARGV", "-- Reply:", "-- redis-cli --eval "] {
                assert!(
                    header.iter().any(|line| line.starts_with(part)),
                    "{part} missing in {}",
                    header[0]
                );
            }
        }
    }
}
