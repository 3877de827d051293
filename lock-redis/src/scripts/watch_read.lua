-- watch_read: marks a lock as watched and reads its holder, in one step.
--
-- KEYS[1]  the lock: "<token> <owner>" (then "\n<value>" if it has one)
-- KEYS[2]  the watchers' marker: while it exists, every change of the
--          lock is published on the channel KEYS[1] .. ':holder'
-- ARGV[1]  how long the marker lives unless set again, ms
-- ARGV[2]  a nonce naming this read
--
-- Sets the marker and publishes "sync <nonce>" on the holder channel, so
-- the watcher that reads knows which of the messages it receives come
-- after this read.
--
-- Reply: {value, pttl in ms (-1: no expiry)}; nil when the lock is free.
--
-- redis-cli --eval <(cat common.lua watch_read.lua) lock watched , 30000 n1

redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
redis.call('PUBLISH', KEYS[1] .. ':holder', 'sync ' .. ARGV[2])
local v = redis.call('GET', KEYS[1])
if not v then return nil end
return {v, redis.call('PTTL', KEYS[1])}
