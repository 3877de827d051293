-- force_release: Redlock's delete on one master, whoever holds the lock.
--
-- KEYS[1]  the lock
-- KEYS[2]  the watchers' marker: while it exists, "free" is published on
--          the channel KEYS[1] .. ':holder'
-- ARGV[1]  the lock's release channel
--
-- Deletes the lock and, if there was one, publishes "released" on the
-- channel (and, if the lock is watched, "free").
--
-- Reply: 1 if the lock was held; 0 if it was free.
--
-- redis-cli --eval <(cat common.lua force_release.lua) lock watched , released

if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], 'released')
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('PUBLISH', KEYS[1] .. ':holder', 'free')
  end
  return 1
end
return 0
