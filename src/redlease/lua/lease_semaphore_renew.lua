-- Extend the leases of held permits of one semaphore (the renewer's batch, or one renew call).
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  leases (zset, see lease_semaphore_acquire.lua)
-- KEYS[3]  semaphore channel
-- ARGV[1]  lease in milliseconds, counted from now (at least 1; anything else is refused
--          before any change)
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3..n+2] permit ids
-- Reply    array of n integers: 1 renewed (or already longer), 0 gone (released, or its lease
--          had run out: then it is given back now and the new count published)
-- A renewal never adds a permit, so it cannot revive a released one, and never shortens a lease.
-- The wake-up it publishes is a hint, sent by pcall: a user the server does not let publish
-- still gets this done (waiters re-check on their own within 5 s).
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
local lease = tonumber(ARGV[1])
if not (lease and lease >= 1) then -- (NaN too)
  return redis.error_reply('ERR redlease: ARGV[1] must be a lease of at least 1 millisecond')
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local until_ms = now_ms + lease
local out = {}
for i = 3, #ARGV do
  local score = redis.call('zscore', KEYS[2], ARGV[i])
  if score and tonumber(score) > now_ms then
    if tonumber(score) < until_ms then
      redis.call('zadd', KEYS[2], 'XX', until_ms, ARGV[i])
    end
    out[i - 2] = 1
  else
    if score then
      redis.call('zrem', KEYS[2], ARGV[i])
      local value = redis.call('incrby', KEYS[1], 1)
      if value > 0 then
        redis.pcall(ARGV[2], KEYS[3], value)
      end
    end
    out[i - 2] = 0
  end
end
return out
