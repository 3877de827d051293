-- common: helpers shared by the scripts. scripts.rs puts this file in
-- front of every script it loads; to run a script by hand, run the two
-- files as one, e.g.
--
--   redis-cli --eval <(cat common.lua acquire.lua) lock counter watched queue waiters , me 30000 1 10000 grants ''
--
-- A lock's value is "<token> <owner>", then "\n<value>" if it has one.

-- The owner of lock value v (nil for no value, or one distlock did not
-- write).
local function owner_of(v)
  local i = v and string.find(v, ' ', 1, true)
  if not i then return nil end
  local j = string.find(v, '\n', i + 1, true)
  return string.sub(v, i + 1, j and j - 1 or -1)
end

-- The fencing token of lock value v (nil if it has none).
local function token_of(v)
  local i = string.find(v, ' ', 1, true)
  if not i then return nil end
  return tonumber(string.sub(v, 1, i - 1))
end

-- The server's clock, in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
