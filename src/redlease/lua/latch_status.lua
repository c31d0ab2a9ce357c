-- Read a latch in one step (changes nothing).
-- KEYS[1]  latch key (the count)
-- KEYS[2]  waiters (zset, see latch_wait.lua)
-- Reply    {count, ttl_ms, waiters}: ttl_ms is the latch key's PTTL (-1: no expiry, -2: no key,
--          the latch is open); waiters counts registrations that have not lapsed
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return {math.max(0, tonumber(redis.call('get', KEYS[1]) or '0')), redis.call('pttl', KEYS[1]),
  redis.call('zcount', KEYS[2], now_ms + 1, '+inf')}
