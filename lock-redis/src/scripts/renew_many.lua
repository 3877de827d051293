-- renew_many: resets the expiry of every lock still ours, in one call.
--
-- KEYS[i]    a lock: "<token> <owner>" (then "\n<value>" if it has one)
-- ARGV[1]    ttl, ms
-- ARGV[i+1]  the owner that must hold KEYS[i]
--
-- Reply: one integer per key: 1 if the lock is still ours (its expiry
-- reset to ttl), 0 if it is gone or someone else's.
--
-- redis-cli --eval <(cat common.lua renew_many.lua) lock-a lock-b , 30000 me me

local renewed = {}
for i, key in ipairs(KEYS) do
  if owner_of(redis.call('GET', key)) == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
