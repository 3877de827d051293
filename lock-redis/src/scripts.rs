//! The Lua scripts, and what their replies mean.
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

/// `owner_of(value)`: the owner part of a lock value.
macro_rules! lua {
    ($body:literal) => {
        concat!(
            "local function owner_of(v)\n",
            "  if not v then return nil end\n",
            "  local i = string.find(v, ' ', 1, true)\n",
            "  if not i then return nil end\n",
            "  return string.sub(v, i + 1)\n",
            "end\n",
            $body
        )
    };
}

/// KEYS: lock, counter. ARGV: owner, ttl ms.
/// Free: `SET lock "<token> owner" NX PX ttl` with `token = INCR counter`,
/// returns `{1, token}`. Held: returns `{0, pttl}`. Held by this very
/// owner (an earlier attempt of the same acquisition whose reply or undo
/// went missing): resets the expiry and returns `{1, its token}`, so a
/// retry never blocks on its own leftover.
const ACQUIRE: &str = lua!(
    r#"
local v = redis.call('GET', KEYS[1])
if v then
  if owner_of(v) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(string.sub(v, 1, string.find(v, ' ', 1, true) - 1))}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ' ' .. ARGV[1], 'NX', 'PX', ARGV[2])
return {1, token}
"#
);

/// KEYS: locks… ARGV: ttl ms, owners… (one per key). Returns 1 per lock
/// still ours (its expiry reset to ttl), 0 per lock gone or not ours.
const RENEW_MANY: &str = lua!(
    r#"
local renewed = {}
for i, key in ipairs(KEYS) do
  if owner_of(redis.call('GET', key)) == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
"#
);

/// KEYS: lock. ARGV: owner, channel. Deletes the lock and announces it if
/// it is ours; returns 1, else 0 and touches nothing.
const RELEASE: &str = lua!(
    r#"
if owner_of(redis.call('GET', KEYS[1])) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
"#
);

/// KEYS: lock. ARGV: channel. Deletes the lock whoever holds it; returns 1
/// if there was one.
const FORCE_RELEASE: &str = r#"
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], 'released')
  return 1
end
return 0
"#;

/// KEYS: lock. Returns `{value, pttl}` or nil when free.
const INSPECT: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return nil end
return {v, redis.call('PTTL', KEYS[1])}
"#;

/// KEYS: lock, counter. ARGV: token, owner. Redlock: raises the counter to
/// at least `token`, and if the lock is ours rewrites its value with that
/// token (keeping its expiry). Returns 1 if the lock is ours, else 0.
const RAISE: &str = lua!(
    r#"
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], ARGV[1])
end
if owner_of(redis.call('GET', KEYS[1])) == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'KEEPTTL')
  return 1
end
return 0
"#
);

/// The scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew_many: Script,
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
        release: Script::new(RELEASE),
        force_release: Script::new(FORCE_RELEASE),
        inspect: Script::new(INSPECT),
        raise: Script::new(RAISE),
    })
}

impl Scripts {
    /// Every script, for loading them ahead of use.
    pub(crate) fn all(&self) -> [&Script; 6] {
        [
            &self.acquire,
            &self.renew_many,
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
    /// Held by someone else for this long (`None`: no expiry set).
    Held(Option<Duration>),
}

impl AcquireReply {
    pub(crate) fn parse(reply: (i64, i64)) -> Self {
        match reply {
            (1, token) => Self::Acquired(FencingToken::new(token.max(0) as u64)),
            (_, pttl) => Self::Held(u64::try_from(pttl).ok().map(Duration::from_millis)),
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
            AcquireReply::parse((1, 7)),
            AcquireReply::Acquired(FencingToken::new(7))
        );
        assert_eq!(
            AcquireReply::parse((0, 1500)),
            AcquireReply::Held(Some(Duration::from_millis(1500)))
        );
        assert_eq!(AcquireReply::parse((0, -1)), AcquireReply::Held(None));
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
        for script in [ACQUIRE, RENEW_MANY, RELEASE, RAISE] {
            assert!(script.starts_with("local function owner_of"));
        }
    }
}
