-- set_value: replaces the value stored with a lock that is ours.
--
-- KEYS[1]  the lock: "<token> <owner>" (then "\n<value>" if it has one)
-- KEYS[2]  the watchers' marker: while it exists, the changed lock is
--          published on the channel KEYS[1] .. ':holder'
-- ARGV[1]  owner
-- ARGV[2]  the new value ('': none)
--
-- If the lock is ours, rewrites it as "<token> <owner>" followed by
-- "\n<value>" for a non-empty value, keeping its expiry, and if the lock
-- is watched publishes "held <pttl> <lock value>".
--
-- Reply: 1 if the lock is ours (its value replaced); 0 if not (nothing
-- is touched).
--
-- redis-cli --eval <(cat common.lua set_value.lua) lock watched , me 10.0.0.7:8080

local found = redis.call('MGET', KEYS[1], KEYS[2])
local v = found[1]
if owner_of(v) ~= ARGV[1] then
  return 0
end
local cut = string.find(v, '\n', 1, true)
local held = cut and string.sub(v, 1, cut - 1) or v
if ARGV[2] ~= '' then held = held .. '\n' .. ARGV[2] end
redis.call('SET', KEYS[1], held, 'KEEPTTL')
if found[2] then
  redis.call('PUBLISH', KEYS[1] .. ':holder', 'held ' .. redis.call('PTTL', KEYS[1]) .. ' ' .. held)
end
return 1
