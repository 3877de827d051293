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
macro_rules! owner_of_lua {
    () => {
        concat!(
            "local function owner_of(v)\n",
            "  if not v then return nil end\n",
            "  local i = string.find(v, ' ', 1, true)\n",
            "  if not i then return nil end\n",
            "  return string.sub(v, i + 1)\n",
            "end\n",
        )
    };
}

/// A script with the `owner_of` helper.
macro_rules! lua {
    ($body:literal) => {
        concat!(owner_of_lua!(), $body)
    };
}

/// `token_of(value)`: the token part of a lock value (nil if none).
/// `now_ms()`: the server's clock in milliseconds.
/// `hand_off()`: frees the lock, handing it to the first waiter of the
/// queue whose liveness deadline has not passed (popping the dead ones on
/// the way) and announcing `"granted <token> <owner>"` on that waiter's
/// grant channel; a lock without a live waiter is deleted. KEYS: lock,
/// counter, queue, waiters.
macro_rules! queue_lua {
    ($body:literal) => {
        concat!(
            owner_of_lua!(),
            "local function token_of(v)\n",
            "  local i = string.find(v, ' ', 1, true)\n",
            "  if not i then return nil end\n",
            "  return tonumber(string.sub(v, 1, i - 1))\n",
            "end\n",
            "local function now_ms()\n",
            "  local t = redis.call('TIME')\n",
            "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
            "end\n",
            "local function grant()\n",
            "  local now = now_ms()\n",
            "  while true do\n",
            "    local owner = redis.call('LPOP', KEYS[3])\n",
            "    if not owner then return false end\n",
            "    local entry = redis.call('HGET', KEYS[4], owner)\n",
            "    if entry then\n",
            "      redis.call('HDEL', KEYS[4], owner)\n",
            "      local deadline, ttl, channel = string.match(entry, '^(%d+) (%d+) (.+)$')\n",
            "      if deadline and tonumber(deadline) >= now then\n",
            "        local token = redis.call('INCR', KEYS[2])\n",
            "        redis.call('SET', KEYS[1], token .. ' ' .. owner, 'PX', ttl)\n",
            "        redis.call('PUBLISH', channel, 'granted ' .. token .. ' ' .. owner)\n",
            "        return true\n",
            "      end\n",
            "    end\n",
            "  end\n",
            "end\n",
            "local function hand_off()\n",
            "  if redis.call('EXISTS', KEYS[3]) == 1 and grant() then return end\n",
            "  redis.call('DEL', KEYS[1])\n",
            "end\n",
            $body
        )
    };
}

/// KEYS: lock, counter, queue, waiters. ARGV: owner, ttl ms, queue mode
/// (`0`: do not queue; `1`: queue if held; `2`: queued before), waiter
/// life ms, the waiter's grant channel (where its backend listens for
/// hand-offs).
///
/// Free: `SET lock "<token> owner" PX ttl` with `token = INCR counter`,
/// returns `{1, token}` (and, in mode 2, drops the owner's waiter entry).
/// Held by this very owner (handed over by a release, or an earlier
/// attempt of the same acquisition whose reply or undo went missing):
/// resets the expiry and returns `{1, its token}`, so a retry never
/// blocks on its own leftover. Held by someone else: in modes 1 and 2
/// queues the owner (or renews its entry, keeping its place) with a
/// liveness deadline of now + waiter life, and returns
/// `{0, pttl, holder's token}`.
///
/// Redlock calls it with two keys and no mode: it never queues.
const ACQUIRE: &str = queue_lua!(
    r#"
local v = redis.call('GET', KEYS[1])
if v then
  if owner_of(v) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token_of(v)}
  end
  if ARGV[3] == '1' or ARGV[3] == '2' then
    local entry = (now_ms() + tonumber(ARGV[4])) .. ' ' .. ARGV[2] .. ' ' .. ARGV[5]
    if redis.call('HSET', KEYS[4], ARGV[1], entry) == 1 then
      redis.call('RPUSH', KEYS[3], ARGV[1])
    end
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
    redis.call('PEXPIRE', KEYS[4], ARGV[4])
  end
  return {0, redis.call('PTTL', KEYS[1]), token_of(v) or 0}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ' ' .. ARGV[1], 'PX', ARGV[2])
if ARGV[3] == '2' then
  redis.call('HDEL', KEYS[4], ARGV[1])
end
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

/// KEYS: lock, counter, queue, waiters. ARGV: owner, leave (`1`: first
/// take the owner out of the queue, for a waiter that gives up). If the lock is ours, hands it to the next live waiter or deletes
/// it, and returns 1; else returns 0 and touches the lock not.
const RELEASE_QUEUED: &str = queue_lua!(
    r#"
if ARGV[2] == '1' then
  redis.call('HDEL', KEYS[4], ARGV[1])
  redis.call('LREM', KEYS[3], 0, ARGV[1])
end
if owner_of(redis.call('GET', KEYS[1])) ~= ARGV[1] then
  return 0
end
hand_off()
return 1
"#
);

/// KEYS: lock, counter, queue, waiters. Frees the lock whoever holds it,
/// handing it to the next live waiter; returns 1 if there was one.
const FORCE_RELEASE_QUEUED: &str = queue_lua!(
    r#"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
hand_off()
return 1
"#
);

/// Redlock: KEYS: lock. ARGV: owner, channel. Deletes the lock and announces it if
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

/// Redlock: KEYS: lock. ARGV: channel. Deletes the lock whoever holds it
/// and announces it; returns 1 if there was one.
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
    pub(crate) release_queued: Script,
    pub(crate) force_release_queued: Script,
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
        force_release_queued: Script::new(FORCE_RELEASE_QUEUED),
        release: Script::new(RELEASE),
        force_release: Script::new(FORCE_RELEASE),
        inspect: Script::new(INSPECT),
        raise: Script::new(RAISE),
    })
}

impl Scripts {
    /// Every script, for loading them ahead of use.
    pub(crate) fn all(&self) -> [&Script; 8] {
        [
            &self.acquire,
            &self.renew_many,
            &self.release_queued,
            &self.force_release_queued,
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
        for script in [
            ACQUIRE,
            RENEW_MANY,
            RELEASE_QUEUED,
            FORCE_RELEASE_QUEUED,
            RELEASE,
            RAISE,
        ] {
            assert!(script.starts_with("local function owner_of"));
        }
    }
}
