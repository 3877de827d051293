-- acquire: takes a lock, or queues for it.
--
-- KEYS[1]  the lock: "<token> <owner>", or "<token> <owner>\n<value>"
--          when the holder stores a value; its expiry the lease
-- KEYS[2]  the fencing-token counter of the lock's bucket (shared with
--          the other names of its namespace, or of its namespace and slot)
-- KEYS[3]  the watchers' marker: while it exists, a new holder is
--          published on the channel KEYS[1] .. ':holder'
-- KEYS[4]  the queue: waiting owners in order of arrival (a list)
-- KEYS[5]  the waiters: owner -> "<deadline ms> <ttl ms> <grant channel>",
--          followed by "\n<value>" for a waiter with a value (a hash);
--          KEYS[4] and KEYS[5] are used only in modes '1' and '2'
-- KEYS[6]  the readers: owner scored by lease end (a sorted set), and
-- KEYS[7]  their values (a hash); both left out by Redlock, which has no
--          read locks
-- ARGV[1]  owner
-- ARGV[2]  ttl, ms
-- ARGV[3]  queue mode: '0' do not queue (also Redlock), '1' queue if
--          held, '2' queued before
-- ARGV[4]  waiter life, ms: how long a queue entry lives unrenewed
-- ARGV[5]  the waiter's grant channel, where its backend hears hand-offs
-- ARGV[6]  the value to store with the lock ('': none)
--
-- Free: sets the lock to "<token> <owner>" (and the value) with token =
-- INCR counter, expiring after ttl (in mode '2' also drops the owner's
-- waiter entry), and if the lock is watched publishes
-- "held <ttl> <lock value>". Held by this very owner (handed over by a
-- release, or an earlier try of the same acquisition whose reply went
-- missing): resets the expiry, so a retry never blocks on its own
-- leftover. Held by someone else (or by live readers): in modes '1' and '2' queues the owner
-- with its value, or renews its entry and keeps its place, with a
-- liveness deadline of now + waiter life.
--
-- Reply: {1, token} when the lock is ours;
--        {0, pttl of the lock, holder's token (0: not a distlock value)}.
--
-- redis-cli --eval <(cat common.lua acquire.lua) lock counter watched queue waiters readers readvalues , me 30000 1 10000 grants ''

local v = redis.call('GET', KEYS[1])
local pttl, holder
if v then
  if owner_of(v) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, token_of(v)}
  end
  pttl, holder = redis.call('PTTL', KEYS[1]), token_of(v) or 0
elseif KEYS[6] and redis.call('EXISTS', KEYS[6]) == 1 then
  -- Readers hold the lock while any of them is live.
  local now = now_ms()
  if sweep(KEYS[6], KEYS[7], now) > 0 then
    local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
    pttl, holder = tonumber(last[2]) - now, 0
  end
end
if pttl then
  if ARGV[3] == '1' or ARGV[3] == '2' then
    local entry = queue_entry(now_ms() + tonumber(ARGV[4]), ARGV[2], ARGV[5], '', ARGV[6])
    join_line(KEYS[4], KEYS[5], ARGV[1], entry, ARGV[4])
  end
  return {0, pttl, holder}
end
local token = redis.call('INCR', KEYS[2])
local held = token .. ' ' .. ARGV[1]
if ARGV[6] ~= '' then held = held .. '\n' .. ARGV[6] end
redis.call('SET', KEYS[1], held, 'PX', ARGV[2])
if ARGV[3] == '2' then
  redis.call('HDEL', KEYS[5], ARGV[1])
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('PUBLISH', KEYS[1] .. ':holder', 'held ' .. ARGV[2] .. ' ' .. held)
end
return {1, token}
