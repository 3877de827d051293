-- release_queued: releases a lock if it is ours (or, as an operator's
-- override, whoever holds it), handing it to the first live waiter of its
-- queue.
--
-- KEYS[1]  the lock: "<token> <owner>" (then "\n<value>" if it has one)
-- KEYS[2]  the fencing-token counter
-- KEYS[3]  the watchers' marker: while it exists, the new holder (or
--          "free") is published on the channel KEYS[1] .. ':holder'
-- KEYS[4]  the queue: waiting owners in order of arrival (a list)
-- KEYS[5]  the waiters: owner -> "<deadline ms> <ttl ms> <grant channel>"
--          (then "\n<value>" if the waiter has one)
-- ARGV[1]  owner (ignored with 'force')
-- ARGV[2]  '0': release if ours; '1': first take the owner out of the
--          queue (a waiter that gives up), then release if ours; 'force':
--          release whoever holds the lock
--
-- The hand-off pops waiters whose liveness deadline has passed, sets the
-- lock to "<INCR counter> <waiter>" (and the waiter's value) with the
-- waiter's ttl, publishes "granted <token> <waiter>" on the waiter's
-- grant channel and, if the lock is watched, "held <ttl> <lock value>";
-- with no live waiter the lock is deleted and, if watched, "free"
-- published.
--
-- Reply: 1 if the lock was ours (with 'force': held) and is released; 0
-- if not (the lock is left alone).
--
-- redis-cli --eval <(cat common.lua release_queued.lua) lock counter watched queue waiters , me 0
-- redis-cli --eval <(cat common.lua release_queued.lua) lock counter watched queue waiters , '' force

local function announce(watched, message)
  if watched then
    redis.call('PUBLISH', KEYS[1] .. ':holder', message)
  end
end
local function grant(watched)
  local now = now_ms()
  while true do
    local owner = redis.call('LPOP', KEYS[4])
    if not owner then return false end
    local entry = redis.call('HGET', KEYS[5], owner)
    if entry then
      redis.call('HDEL', KEYS[5], owner)
      local deadline, ttl, channel, value = string.match(entry, '^(%d+) (%d+) ([^\n]+)\n?(.*)$')
      if deadline and tonumber(deadline) >= now then
        local token = redis.call('INCR', KEYS[2])
        local held = token .. ' ' .. owner
        if value ~= '' then held = held .. '\n' .. value end
        redis.call('SET', KEYS[1], held, 'PX', ttl)
        redis.call('PUBLISH', channel, 'granted ' .. token .. ' ' .. owner)
        announce(watched, 'held ' .. ttl .. ' ' .. held)
        return true
      end
    end
  end
end
local function hand_off()
  -- One call answers the common case, no waiters and no watchers; only
  -- when either exists is it asked which.
  local either = redis.call('EXISTS', KEYS[4], KEYS[3])
  local watched = either > 0 and redis.call('EXISTS', KEYS[3]) == 1
  local queued = either > (watched and 1 or 0)
  if queued and grant(watched) then return end
  redis.call('DEL', KEYS[1])
  announce(watched, 'free')
end

if ARGV[2] == 'force' then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return 0
  end
else
  if ARGV[2] == '1' then
    redis.call('HDEL', KEYS[5], ARGV[1])
    redis.call('LREM', KEYS[4], 0, ARGV[1])
  end
  if owner_of(redis.call('GET', KEYS[1])) ~= ARGV[1] then
    return 0
  end
end
hand_off()
return 1
