-- set_hold_value: replaces the value stored with a read lock or a permit
-- that is ours.
--
-- KEYS[1]  the holds: owner scored by the end of its lease (sorted set;
--          the readers or the permits)
-- KEYS[2]  their values: owner -> "<token> <owner>" (then "\n<value>")
-- ARGV[1]  owner
-- ARGV[2]  the new value ('': none)
--
-- If the owner's hold is live, rewrites its entry as "<token> <owner>"
-- followed by "\n<value>" for a non-empty value.
--
-- Reply: 1 if the hold is ours (its value replaced); 0 if not (nothing
-- is touched).
--
-- redis-cli --eval <(cat common.lua set_hold_value.lua) readers readvalues , me 10.0.0.7:8080

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now_ms() then
  return 0
end
local held = (token_of(redis.call('HGET', KEYS[2], ARGV[1]) or '') or 0) .. ' ' .. ARGV[1]
if ARGV[2] ~= '' then held = held .. '\n' .. ARGV[2] end
redis.call('HSET', KEYS[2], ARGV[1], held)
return 1
