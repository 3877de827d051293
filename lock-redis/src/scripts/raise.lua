-- raise: Redlock's fencing step on one master.
--
-- KEYS[1]  the lock: "<token> <owner>" (then "\n<value>" if it has one)
-- KEYS[2]  the fencing-token counter of the lock's namespace (shared by
--          its names)
-- KEYS[3]  the watchers' marker: while it exists, the stamped lock is
--          published on the channel KEYS[1] .. ':holder'
-- ARGV[1]  token: the largest counter value of the masters that granted
-- ARGV[2]  owner
--
-- Raises the counter to at least the token and, if the lock is ours,
-- rewrites its token (keeping its owner, value and expiry); if the lock is
-- watched, publishes "held <pttl> <lock value>".
--
-- Reply: 1 if the lock is ours (now stamped with the token); 0 if not.
--
-- redis-cli --eval <(cat common.lua raise.lua) lock counter watched , 42 me

local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], ARGV[1])
end
local found = redis.call('MGET', KEYS[1], KEYS[3])
local v = found[1]
if owner_of(v) == ARGV[2] then
  local space = string.find(v, ' ', 1, true)
  local held = ARGV[1] .. string.sub(v, space)
  redis.call('SET', KEYS[1], held, 'KEEPTTL')
  if found[2] then
    redis.call('PUBLISH', KEYS[1] .. ':holder', 'held ' .. redis.call('PTTL', KEYS[1]) .. ' ' .. held)
  end
  return 1
end
return 0
