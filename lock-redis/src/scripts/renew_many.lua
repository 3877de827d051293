-- renew_many: resets the expiry of every lock still ours, in one call.
--
-- KEYS[i]    a lock: "<token> <owner>"
-- ARGV[1]    ttl, ms
-- ARGV[i+1]  the owner that must hold KEYS[i]
--
-- Reply: one integer per key: 1 if the lock is still ours (its expiry
-- reset to ttl), 0 if it is gone or someone else's.
--
-- redis-cli --eval renew_many.lua lock-a lock-b , 30000 me me

local function owner_of(v)
  local i = v and string.find(v, ' ', 1, true)
  return i and string.sub(v, i + 1) or nil
end

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
