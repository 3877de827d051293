-- release: Redlock's owner-checked delete on one master.
--
-- KEYS[1]  the lock: "<token> <owner>"
-- ARGV[1]  owner
-- ARGV[2]  the lock's release channel
--
-- Deletes the lock if it is ours and publishes "released" on the channel.
--
-- Reply: 1 if the lock was ours; 0 if not (nothing is touched).
--
-- redis-cli --eval release.lua lock , me released

local function owner_of(v)
  local i = v and string.find(v, ' ', 1, true)
  return i and string.sub(v, i + 1) or nil
end

if owner_of(redis.call('GET', KEYS[1])) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
