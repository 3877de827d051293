-- renew_hold: renews the lease of a read lock or a permit that is ours.
--
-- KEYS[1]  the holds: owner scored by the end of its lease (sorted set;
--          the readers or the permits)
-- KEYS[2]  their values: owner -> "<token> <owner>" (then "\n<value>")
-- KEYS[3]  for permits, the limit they are held under (it must outlive
--          them); absent for read locks
-- ARGV[1]  owner
-- ARGV[2]  ttl, ms
--
-- If the owner's hold is there and its lease has not ended, the lease
-- ends ttl from now (ZADD XX), and the keys live at least that long.
--
-- Reply: 1 if the hold is still ours (renewed); 0 if it is gone or over.
--
-- redis-cli --eval <(cat common.lua renew_hold.lua) readers readvalues , me 30000

if renew_hold(KEYS[1], KEYS[2], ARGV[1], ARGV[2], now_ms()) then
  if KEYS[3] then keep_for(KEYS[3], ARGV[2]) end
  return 1
end
return 0
