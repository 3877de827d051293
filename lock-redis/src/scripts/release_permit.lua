-- release_permit: gives a permit back if it is ours, letting in the
-- waiters at the front of the semaphore's queue that fit.
--
-- KEYS[1]  the permits: owner scored by the end of its lease (sorted set)
-- KEYS[2]  the permits' values: owner -> "<token> <owner>" (then
--          "\n<value>"; a hash)
-- KEYS[3]  the limit the permits are held under (removed with the last
--          permit)
-- KEYS[4]  the fencing-token counter of the name's bucket
-- KEYS[5]  the semaphore's queue: waiting owners in order of arrival
-- KEYS[6]  the semaphore's waiters: owner -> entry (see queue_entry in
--          common.lua; the kind is the limit asked under)
-- ARGV[1]  owner
-- ARGV[2]  '0': give back if ours; '1': first take the owner out of the
--          queue (a waiter that gives up), then give back if ours
--
-- Then, while the queue's front fits, it is let in: waiters whose
-- liveness deadline has passed are dropped, and so are waiters asking
-- under a limit other than the one live permits are held under (they
-- learn it at their next try); a waiter gets a permit (token = INCR
-- counter, its ttl and value, its limit stored) while fewer than its
-- limit are held, and is told "granted <token> <waiter>" on its grant
-- channel. Once no live permit is left, the limit is removed.
--
-- Reply: 1 if the permit was ours and live, and is given back; 0 if not.
--
-- redis-cli --eval <(cat common.lua release_permit.lua) permits permitvalues limit counter permitqueue permitwaiters , me 0

local function dispatch(now)
  local held = sweep(KEYS[1], KEYS[2], now)
  local stored = tonumber(redis.call('GET', KEYS[3]) or '0')
  while true do
    local owner = redis.call('LINDEX', KEYS[5], 0)
    if not owner then return end
    local entry = redis.call('HGET', KEYS[6], owner)
    local deadline, ttl, channel, kind, value
    if entry then deadline, ttl, channel, kind, value = parse_entry(entry) end
    local limit = tonumber(kind)
    if not deadline or deadline < now or not limit or (held > 0 and limit ~= stored) then
      redis.call('LPOP', KEYS[5])
      if entry then redis.call('HDEL', KEYS[6], owner) end
    elseif held >= limit then
      return
    else
      redis.call('LPOP', KEYS[5])
      redis.call('HDEL', KEYS[6], owner)
      local token = redis.call('INCR', KEYS[4])
      add_hold(KEYS[1], KEYS[2], owner, token, ttl, value, now)
      set_limit(KEYS[3], limit, ttl)
      redis.call('PUBLISH', channel, 'granted ' .. token .. ' ' .. owner)
      held, stored = held + 1, limit
    end
  end
end

if ARGV[2] == '1' then
  redis.call('HDEL', KEYS[6], ARGV[1])
  redis.call('LREM', KEYS[5], 0, ARGV[1])
end
local now = now_ms()
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
if (score or ARGV[2] == '1') and redis.call('EXISTS', KEYS[5]) == 1 then
  dispatch(now)
end
if sweep(KEYS[1], KEYS[2], now) == 0 then
  redis.call('DEL', KEYS[3])
end
if score and tonumber(score) > now then
  return 1
end
return 0
