-- acquire_permit: takes one permit of a semaphore, or queues for one.
--
-- KEYS[1]  the permits: owner scored by the end of its lease, server
--          clock in ms (a sorted set)
-- KEYS[2]  the permits' values: owner -> "<token> <owner>" (then
--          "\n<value>"; a hash)
-- KEYS[3]  the limit the permits are held under: it lives at least as
--          long as every live permit, and goes with the last one
-- KEYS[4]  the fencing-token counter of the name's bucket (the one its
--          lock draws from)
-- KEYS[5]  the semaphore's queue: waiting owners in order of arrival
-- KEYS[6]  the semaphore's waiters: owner -> entry (see queue_entry in
--          common.lua; the kind is the limit asked under)
-- ARGV[1]  owner
-- ARGV[2]  ttl, ms
-- ARGV[3]  queue mode: '0' do not queue, '1' queue if full, '2' queued
--          before
-- ARGV[4]  waiter life, ms: how long a queue entry lives unrenewed
-- ARGV[5]  the waiter's grant channel, where its backend hears hand-offs
-- ARGV[6]  the value to store with the permit ('': none)
-- ARGV[7]  the limit
--
-- A holder that already has its permit (handed over by a release, or an
-- earlier try whose reply went missing) has its lease renewed. Otherwise
-- expired permits are swept; live permits held under another limit
-- refuse the request; else a permit is taken (token = INCR counter, the
-- limit stored) if fewer than `limit` are held and no live waiter stands
-- in line before us; the limit's expiry follows the permit's lease.
-- Refused, modes '1' and '2' queue the owner (or renew its place).
--
-- Reply: {1, token} when the permit is ours;
--        {0, ms until the soonest permit's lease ends, 0} when full;
--        {2, the stored limit} when permits are held under another limit.
--
-- redis-cli --eval <(cat common.lua acquire_permit.lua) permits permitvalues limit counter permitqueue permitwaiters , me 30000 1 3000 grants '' 3

local now = now_ms()
local mine = already_holding(KEYS[1], KEYS[2], KEYS[6], ARGV[1], ARGV[2], ARGV[3], now)
if mine then
  keep_for(KEYS[3], ARGV[2])
  return {1, mine}
end
local held = sweep(KEYS[1], KEYS[2], now)
local limit = tonumber(ARGV[7])
if held > 0 then
  local stored = tonumber(redis.call('GET', KEYS[3]) or limit)
  if stored ~= limit then
    if ARGV[3] == '2' then
      redis.call('HDEL', KEYS[6], ARGV[1])
      redis.call('LREM', KEYS[5], 0, ARGV[1])
    end
    return {2, stored}
  end
end
if held >= limit or waiter_ahead(KEYS[5], KEYS[6], ARGV[1], now, false) then
  if ARGV[3] == '1' or ARGV[3] == '2' then
    local entry = queue_entry(now + tonumber(ARGV[4]), ARGV[2], ARGV[5], ARGV[7], ARGV[6])
    join_line(KEYS[5], KEYS[6], ARGV[1], entry, ARGV[4])
  end
  local pttl = -1
  if held > 0 then
    pttl = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]) - now
  end
  return {0, pttl, 0}
end
local token = redis.call('INCR', KEYS[4])
add_hold(KEYS[1], KEYS[2], ARGV[1], token, ARGV[2], ARGV[6], now)
set_limit(KEYS[3], limit, ARGV[2])
if ARGV[3] == '2' then
  redis.call('HDEL', KEYS[6], ARGV[1])
  redis.call('LREM', KEYS[5], 0, ARGV[1])
end
return {1, token}
