-- force_release: Redlock's delete on one master, whoever holds the lock.
--
-- KEYS[1]  the lock
-- ARGV[1]  the lock's release channel
--
-- Deletes the lock and, if there was one, publishes "released" on the
-- channel.
--
-- Reply: 1 if the lock was held; 0 if it was free.
--
-- redis-cli --eval force_release.lua lock , released

if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], 'released')
  return 1
end
return 0
