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

-- A waiter's entry in a line's hash: "<deadline ms> <ttl ms> <grant
-- channel>", then " <kind>" for a reader ('shared') or a permit (the
-- limit it asks under), then "\n<value>" if the waiter has a value.
local function queue_entry(deadline, ttl, channel, kind, value)
  local entry = deadline .. ' ' .. ttl .. ' ' .. channel
  if kind ~= '' then entry = entry .. ' ' .. kind end
  if value ~= '' then entry = entry .. '\n' .. value end
  return entry
end

-- Splits a waiter's entry: deadline (a number), ttl, channel, kind (''
-- for an exclusive waiter), value.
local function parse_entry(entry)
  local deadline, ttl, channel, kind, value =
    string.match(entry, '^(%d+) (%d+) (%S+) ?(%S*)\n?(.*)$')
  return tonumber(deadline), ttl, channel, kind, value
end

-- Puts `me` at the back of line q (entries in hash w), or renews its
-- entry and keeps its place; the line lives `life` ms unrenewed.
local function join_line(q, w, me, entry, life)
  if redis.call('HSET', w, me, entry) == 1 then
    redis.call('RPUSH', q, me)
  end
  redis.call('PEXPIRE', q, life)
  redis.call('PEXPIRE', w, life)
end

-- Whether a live waiter stands in line q (entries in hash w) before `me`
-- (anywhere, if `me` is not in line); with `exclusive_only`, readers in
-- line do not count.
local function waiter_ahead(q, w, me, now, exclusive_only)
  for _, owner in ipairs(redis.call('LRANGE', q, 0, -1)) do
    if owner == me then return false end
    local entry = redis.call('HGET', w, owner)
    if entry then
      local deadline, _, _, kind = parse_entry(entry)
      if deadline and deadline >= now and not (exclusive_only and kind == 'shared') then
        return true
      end
    end
  end
  return false
end

-- Makes key k live for at least ms more.
local function keep_for(k, ms)
  if redis.call('PTTL', k) < tonumber(ms) then
    redis.call('PEXPIRE', k, ms)
  end
end

-- Stores in key k the limit permits are held under, living at least ttl
-- ms more: as long as the permit just given (every grant and renewal of
-- a permit calls it), so it outlives every live permit.
local function set_limit(k, limit, ttl)
  redis.call('SET', k, limit, 'KEEPTTL')
  keep_for(k, ttl)
end

-- Drops the holds of sorted set z (values in hash h) whose lease ended
-- by now; returns how many are left.
local function sweep(z, h, now)
  local gone = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  if #gone > 0 then
    redis.call('HDEL', h, unpack(gone))
    redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
  end
  return redis.call('ZCARD', z)
end

-- Adds the hold of `owner` to sorted set z (lease ttl ms from now) with
-- "<token> <owner>" (then "\n<value>") in hash h.
local function add_hold(z, h, owner, token, ttl, value, now)
  local held = token .. ' ' .. owner
  if value ~= '' then held = held .. '\n' .. value end
  redis.call('ZADD', z, now + tonumber(ttl), owner)
  redis.call('HSET', h, owner, held)
  keep_for(z, ttl)
  keep_for(h, ttl)
end

-- The token of the live hold of `owner` in sorted set z (values in hash
-- h), its lease renewed to ttl ms from now; nil if it has none.
local function renew_hold(z, h, owner, ttl, now)
  local score = redis.call('ZSCORE', z, owner)
  if not score or tonumber(score) <= now then return nil end
  redis.call('ZADD', z, 'XX', now + tonumber(ttl), owner)
  keep_for(z, ttl)
  keep_for(h, ttl)
  return token_of(redis.call('HGET', h, owner) or '') or 0
end

-- A retried request that already holds: its hold renewed (see
-- renew_hold) and, if it was queued (queued == '2'), its waiter entry in
-- hash waiters removed; the token, or nil if it holds nothing.
local function already_holding(z, h, waiters, owner, ttl, queued, now)
  local mine = renew_hold(z, h, owner, ttl, now)
  if mine and queued == '2' then redis.call('HDEL', waiters, owner) end
  return mine
end
