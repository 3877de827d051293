-- release: Redlock's owner-checked delete on one master.
--
-- KEYS[1]  the lock: "<token> <owner>" (then "\n<value>" if it has one)
-- KEYS[2]  the watchers' marker: while it exists, "free" is published on
--          the channel KEYS[1] .. ':holder'
-- ARGV[1]  owner
-- ARGV[2]  the lock's release channel
--
-- Deletes the lock if it is ours and publishes "released" on the channel
-- (and, if the lock is watched, "free").
--
-- Reply: 1 if the lock was ours; 0 if not (nothing is touched).
--
-- redis-cli --eval <(cat common.lua release.lua) lock watched , me released

local found = redis.call('MGET', KEYS[1], KEYS[2])
if owner_of(found[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  if found[2] then
    redis.call('PUBLISH', KEYS[1] .. ':holder', 'free')
  end
  return 1
end
return 0
