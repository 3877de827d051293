-- raise: Redlock's fencing step on one master.
--
-- KEYS[1]  the lock: "<token> <owner>"
-- KEYS[2]  the fencing-token counter
-- ARGV[1]  token: the largest counter value of the masters that granted
-- ARGV[2]  owner
--
-- Raises the counter to at least the token and, if the lock is ours,
-- rewrites its value with that token (keeping its expiry).
--
-- Reply: 1 if the lock is ours (now stamped with the token); 0 if not.
--
-- redis-cli --eval raise.lua lock counter , 42 me

local function owner_of(v)
  local i = v and string.find(v, ' ', 1, true)
  return i and string.sub(v, i + 1) or nil
end

local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], ARGV[1])
end
if owner_of(redis.call('GET', KEYS[1])) == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'KEEPTTL')
  return 1
end
return 0
