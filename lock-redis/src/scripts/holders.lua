-- holders: every live hold of a lock (its exclusive holder, or its
-- readers) or of a semaphore (its permits).
--
-- KEYS[1]  the lock (for a semaphore: its limit)
-- KEYS[2]  the readers (the permits): owner scored by the end of its lease
-- KEYS[3]  their values: owner -> "<token> <owner>" (then "\n<value>")
-- ARGV[1]  'lock' or 'semaphore'
--
-- Reply: {head, value, pttl, value, pttl, ...}: for a lock with an
-- exclusive holder, head 'exclusive' and its lock value and PTTL (-1: no
-- expiry); else head 'shared' (for a semaphore: the stored limit, '0' if
-- none) and each live hold's value and ms left on its lease, soonest
-- ending first.
--
-- redis-cli --eval <(cat common.lua holders.lua) lock readers readvalues , lock

if ARGV[1] == 'lock' then
  local v = redis.call('GET', KEYS[1])
  if v then
    return {'exclusive', v, redis.call('PTTL', KEYS[1])}
  end
end
local reply = {'shared'}
if ARGV[1] ~= 'lock' then
  reply[1] = redis.call('GET', KEYS[1]) or '0'
end
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local value = redis.call('HGET', KEYS[3], live[i])
  if value then
    reply[#reply + 1] = value
    reply[#reply + 1] = tonumber(live[i + 1]) - now
  end
end
return reply
