-- Renew the leases of many held locks in one call (the watchdog's batch).
-- KEYS[1..n]  lock keys
-- ARGV[1]     lease in milliseconds
-- ARGV[2..n+1] owner field for each key, in the same order
-- Reply       array of n integers: 1 renewed (or already longer), 0 the hold is gone
-- A renewal never creates a key, so it cannot revive a released lock, and never shortens a
-- longer lease that a hold asked for.
local lease = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    if redis.call('pttl', KEYS[i]) < lease then
      redis.call('pexpire', KEYS[i], lease)
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
