-- acquire_read: takes a read lock (a shared hold of the lock), or queues
-- for it.
--
-- KEYS[1]  the lock: its exclusive holder, "<token> <owner>" (then
--          "\n<value>"), with the lease as its expiry
-- KEYS[2]  the fencing-token counter of the lock's bucket, shared by
--          exclusive and read holds (and the other names of the bucket)
-- KEYS[3]  the watchers' marker (unused: watchers see exclusive holders)
-- KEYS[4]  the queue: waiting owners in order of arrival (a list)
-- KEYS[5]  the waiters: owner -> entry (see queue_entry in common.lua;
--          a reader's kind is 'shared')
-- KEYS[6]  the readers: owner scored by the end of its lease, server
--          clock in ms (a sorted set)
-- KEYS[7]  the readers' values: owner -> "<token> <owner>" (then
--          "\n<value>"; a hash)
-- ARGV[1]  owner
-- ARGV[2]  ttl, ms
-- ARGV[3]  queue mode: '0' do not queue, '1' queue if held, '2' queued
--          before
-- ARGV[4]  waiter life, ms: how long a queue entry lives unrenewed
-- ARGV[5]  the waiter's grant channel, where its backend hears hand-offs
-- ARGV[6]  the value to store with the hold ('': none)
--
-- A reader that already holds (handed the lock by a release, or an
-- earlier try whose reply went missing) has its lease renewed. Otherwise
-- expired readers are swept, and the read lock is taken (token = INCR
-- counter) unless an exclusive holder holds the lock or a live exclusive
-- waiter stands in line before us: readers never overtake a waiting
-- writer. Refused, modes '1' and '2' queue the owner (or renew its
-- place) as a reader.
--
-- Reply: {1, token} when the read lock is ours;
--        {0, pttl of the exclusive holder (-1: none, a writer waits),
--         exclusive holder's token (0: none)}.
--
-- redis-cli --eval <(cat common.lua acquire_read.lua) lock counter watched queue waiters readers readvalues , me 30000 1 3000 grants ''

local now = now_ms()
local mine = already_holding(KEYS[6], KEYS[7], KEYS[5], ARGV[1], ARGV[2], ARGV[3], now)
if mine then return {1, mine} end
local v = redis.call('GET', KEYS[1])
local pttl, holder
if v then
  pttl, holder = redis.call('PTTL', KEYS[1]), token_of(v) or 0
elseif waiter_ahead(KEYS[4], KEYS[5], ARGV[1], now, true) then
  pttl, holder = -1, 0
end
if pttl then
  if ARGV[3] == '1' or ARGV[3] == '2' then
    local entry = queue_entry(now + tonumber(ARGV[4]), ARGV[2], ARGV[5], 'shared', ARGV[6])
    join_line(KEYS[4], KEYS[5], ARGV[1], entry, ARGV[4])
  end
  return {0, pttl, holder}
end
sweep(KEYS[6], KEYS[7], now)
local token = redis.call('INCR', KEYS[2])
add_hold(KEYS[6], KEYS[7], ARGV[1], token, ARGV[2], ARGV[6], now)
if ARGV[3] == '2' then
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('LREM', KEYS[4], 0, ARGV[1])
end
return {1, token}
