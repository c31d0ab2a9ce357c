-- Set a held permit's lease to a new length from now, shorter or longer (Redisson
-- RPermitExpirableSemaphore updateLeaseTime), after giving back permits whose lease ran out.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  leases (zset, see lease_semaphore_acquire.lua)
-- KEYS[3]  semaphore channel; a count raised by expired leases is published
-- ARGV[1]  permit id (16 bytes)
-- ARGV[2]  the new lease in milliseconds, counted from now (server clock)
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    1 when the permit is held and its lease now ends ARGV[2] ms from now; 0 when it is
--          not held (never granted, released, or its lease had run out: then it is given
--          back now). Running it again sets the same lease from the later time.
-- At most 100 expired leases are given back per call (bounded work; the rest on the next one).
-- The wake-up it publishes is a hint, sent by pcall: a user the server does not let publish
-- still gets this done (waiters re-check on their own within 5 s).
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[3] must be publish or spublish')
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local score = redis.call('zscore', KEYS[2], ARGV[1])
if score and tonumber(score) > now_ms then
  redis.call('zadd', KEYS[2], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
end
local expired = redis.call('zrangebyscore', KEYS[2], '-inf', now_ms, 'limit', 0, 100)
if score and tonumber(score) <= now_ms and redis.call('zscore', KEYS[2], ARGV[1]) then
  table.insert(expired, ARGV[1]) -- past the first 100: its own lease is given back too
end
if #expired > 0 then
  local gone = redis.call('zrem', KEYS[2], unpack(expired))
  local value = redis.call('incrby', KEYS[1], gone)
  if value > 0 then
    redis.pcall(ARGV[3], KEYS[3], value)
  end
end
if score and tonumber(score) > now_ms then
  return 1
end
return 0
