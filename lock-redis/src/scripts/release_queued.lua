-- release_queued: releases an exclusive or read hold if it is ours (or,
-- as an operator's override, every hold of the lock), letting in the
-- waiters at the front of its queue that fit.
--
-- KEYS[1]  the lock: "<token> <owner>" (then "\n<value>" if it has one)
-- KEYS[2]  the fencing-token counter of the lock's bucket
-- KEYS[3]  the watchers' marker: while it exists, the new exclusive holder
--          (or "free") is published on the channel KEYS[1] .. ':holder'
-- KEYS[4]  the queue: waiting owners in order of arrival (a list)
-- KEYS[5]  the waiters: owner -> entry (see queue_entry in common.lua)
-- KEYS[6]  the readers: owner scored by the end of its lease (sorted set)
-- KEYS[7]  the readers' values: owner -> "<token> <owner>" (then
--          "\n<value>"; a hash)
-- ARGV[1]  owner; with 'force', the highest token of the holds to remove
-- ARGV[2]  '0': release if ours; '1': first take the owner out of the
--          queue (a waiter that gives up), then release if ours; 'force':
--          release the exclusive holder and every reader whose token is
--          at most ARGV[1] (the holds the caller saw: a client that runs
--          the call again after a lost reply leaves the holders that came
--          after alone)
--
-- Once nobody holds (the exclusive holder left, or the last live reader),
-- the queue's front is let in: waiters whose liveness deadline has
-- passed are dropped; an exclusive waiter gets the lock ("<INCR counter>
-- <waiter>", its value, its ttl) if no reader holds, and a reader at the
-- front gets a read lock, and so does every reader right behind it. Each
-- is told "granted <token> <waiter>" on its grant channel. If the lock
-- is watched, "held <ttl> <lock value>" is published for an exclusive
-- grant, else "free" after an exclusive release. A waiter that gives up
-- also lets in the readers it held back.
--
-- Reply: 1 if the hold was ours and live (with 'force': anything was
-- held) and is released; 0 if not (the lock is left alone).
--
-- redis-cli --eval <(cat common.lua release_queued.lua) lock counter watched queue waiters readers readvalues , me 0
-- redis-cli --eval <(cat common.lua release_queued.lua) lock counter watched queue waiters readers readvalues , 41 force

local function announce(watched, message)
  if watched then
    redis.call('PUBLISH', KEYS[1] .. ':holder', message)
  end
end
-- Lets in the queue's front while it fits; the lock key is free. Returns
-- whether an exclusive waiter got the lock.
local function dispatch(watched)
  local now = now_ms()
  local readers = sweep(KEYS[6], KEYS[7], now)
  while true do
    local owner = redis.call('LINDEX', KEYS[4], 0)
    if not owner then return false end
    local entry = redis.call('HGET', KEYS[5], owner)
    local deadline, ttl, channel, kind, value
    if entry then deadline, ttl, channel, kind, value = parse_entry(entry) end
    if not deadline or deadline < now then
      redis.call('LPOP', KEYS[4])
      if entry then redis.call('HDEL', KEYS[5], owner) end
    elseif kind == 'shared' then
      redis.call('LPOP', KEYS[4])
      redis.call('HDEL', KEYS[5], owner)
      local token = redis.call('INCR', KEYS[2])
      add_hold(KEYS[6], KEYS[7], owner, token, ttl, value, now)
      redis.call('PUBLISH', channel, 'granted ' .. token .. ' ' .. owner)
      readers = readers + 1
    elseif readers > 0 then
      return false
    else
      redis.call('LPOP', KEYS[4])
      redis.call('HDEL', KEYS[5], owner)
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
-- The lock key is free (or being freed): let waiters in, or tell
-- watchers it is free.
local function hand_off()
  -- One call answers the common case, no waiters and no watchers; only
  -- when either exists is it asked which.
  local either = redis.call('EXISTS', KEYS[4], KEYS[3])
  local watched = either > 0 and redis.call('EXISTS', KEYS[3]) == 1
  local queued = either > (watched and 1 or 0)
  if queued and dispatch(watched) then return end
  announce(watched, 'free')
end

if ARGV[2] == 'force' then
  local upto, removed = tonumber(ARGV[1]), false
  local v = redis.call('GET', KEYS[1])
  if v and (token_of(v) or 0) <= upto then
    redis.call('DEL', KEYS[1])
    removed = true
  end
  local readers = redis.call('HGETALL', KEYS[7])
  for i = 1, #readers, 2 do
    if (token_of(readers[i + 1]) or 0) <= upto then
      redis.call('ZREM', KEYS[6], readers[i])
      redis.call('HDEL', KEYS[7], readers[i])
      removed = true
    end
  end
  if not removed then
    return 0
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then
    hand_off()
  end
  return 1
end
if ARGV[2] == '1' then
  redis.call('HDEL', KEYS[5], ARGV[1])
  redis.call('LREM', KEYS[4], 0, ARGV[1])
end
local v = redis.call('GET', KEYS[1])
if v then
  if owner_of(v) ~= ARGV[1] then
    return 0
  end
  redis.call('DEL', KEYS[1])
  hand_off()
  return 1
end
local score = redis.call('ZSCORE', KEYS[6], ARGV[1])
if score then
  redis.call('ZREM', KEYS[6], ARGV[1])
  redis.call('HDEL', KEYS[7], ARGV[1])
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  -- The last reader gone, or a waiter gone that held readers back.
  dispatch(redis.call('EXISTS', KEYS[3]) == 1)
end
if score and tonumber(score) > now_ms() then
  return 1
end
return 0
