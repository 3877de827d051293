-- release_queued: releases a lock if it is ours (or, as an operator's
-- override, whoever holds it), handing it to the first live waiter of its
-- queue.
--
-- KEYS[1]  the lock: "<token> <owner>"
-- KEYS[2]  the fencing-token counter
-- KEYS[3]  the queue: waiting owners in order of arrival (a list)
-- KEYS[4]  the waiters: owner -> "<deadline ms> <ttl ms> <grant channel>"
-- ARGV[1]  owner (ignored with 'force')
-- ARGV[2]  '0': release if ours; '1': first take the owner out of the
--          queue (a waiter that gives up), then release if ours; 'force':
--          release whoever holds the lock
--
-- The hand-off pops waiters whose liveness deadline has passed, sets the
-- lock to "<INCR counter> <waiter>" with the waiter's ttl and publishes
-- "granted <token> <waiter>" on the waiter's grant channel; with no live
-- waiter the lock is deleted.
--
-- Reply: 1 if the lock was ours (with 'force': held) and is released; 0
-- if not (the lock is left alone).
--
-- redis-cli --eval release_queued.lua lock counter queue waiters , me 0
-- redis-cli --eval release_queued.lua lock counter queue waiters , '' force

local function owner_of(v)
  local i = v and string.find(v, ' ', 1, true)
  return i and string.sub(v, i + 1) or nil
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function grant()
  local now = now_ms()
  while true do
    local owner = redis.call('LPOP', KEYS[3])
    if not owner then return false end
    local entry = redis.call('HGET', KEYS[4], owner)
    if entry then
      redis.call('HDEL', KEYS[4], owner)
      local deadline, ttl, channel = string.match(entry, '^(%d+) (%d+) (.+)$')
      if deadline and tonumber(deadline) >= now then
        local token = redis.call('INCR', KEYS[2])
        redis.call('SET', KEYS[1], token .. ' ' .. owner, 'PX', ttl)
        redis.call('PUBLISH', channel, 'granted ' .. token .. ' ' .. owner)
        return true
      end
    end
  end
end
local function hand_off()
  if redis.call('EXISTS', KEYS[3]) == 1 and grant() then return end
  redis.call('DEL', KEYS[1])
end

if ARGV[2] == 'force' then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return 0
  end
else
  if ARGV[2] == '1' then
    redis.call('HDEL', KEYS[4], ARGV[1])
    redis.call('LREM', KEYS[3], 0, ARGV[1])
  end
  if owner_of(redis.call('GET', KEYS[1])) ~= ARGV[1] then
    return 0
  end
end
hand_off()
return 1
