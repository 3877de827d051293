-- inspect: who holds a lock, and for how long still.
--
-- KEYS[1]  the lock: "<token> <owner>" (or any value not written by distlock)
-- ARGV     none
--
-- Reply: {value, pttl in ms (-1: no expiry)}; nil when the lock is free.
--
-- redis-cli --eval <(cat common.lua inspect.lua) lock

local v = redis.call('GET', KEYS[1])
if not v then return nil end
return {v, redis.call('PTTL', KEYS[1])}
