-- acquire: takes a lock, or queues for it.
--
-- KEYS[1]  the lock: "<token> <owner>", its expiry the lease
-- KEYS[2]  the fencing-token counter
-- KEYS[3]  the queue: waiting owners in order of arrival (a list)
-- KEYS[4]  the waiters: owner -> "<deadline ms> <ttl ms> <grant channel>"
--          (a hash); KEYS[3] and KEYS[4] are used only in modes '1' and '2'
-- ARGV[1]  owner
-- ARGV[2]  ttl, ms
-- ARGV[3]  queue mode: '0' do not queue, '1' queue if held, '2' queued
--          before; left out: never queue (Redlock)
-- ARGV[4]  waiter life, ms: how long a queue entry lives unrenewed
-- ARGV[5]  the waiter's grant channel, where its backend hears hand-offs
--
-- Free: sets the lock to "<token> <owner>" with token = INCR counter,
-- expiring after ttl (in mode '2' also drops the owner's waiter entry).
-- Held by this very owner (handed over by a release, or an earlier try of
-- the same acquisition whose reply went missing): resets the expiry, so a
-- retry never blocks on its own leftover. Held by someone else: in modes
-- '1' and '2' queues the owner, or renews its entry and keeps its place,
-- with a liveness deadline of now + waiter life.
--
-- Reply: {1, token} when the lock is ours;
--        {0, pttl of the lock, holder's token (0: not a distlock value)}.
--
-- redis-cli --eval acquire.lua lock counter queue waiters , me 30000 1 10000 grants

local function owner_of(v)
  local i = v and string.find(v, ' ', 1, true)
  return i and string.sub(v, i + 1) or nil
end
local function token_of(v)
  local i = string.find(v, ' ', 1, true)
  if not i then return nil end
  return tonumber(string.sub(v, 1, i - 1))
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

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
