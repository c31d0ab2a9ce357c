-- Read a semaphore in one step.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  total permits (see semaphore_try_set.lua)
-- KEYS[3]  waiters (zset, see semaphore_acquire.lua)
-- Reply    {available, total, waiters, ttl_ms}: available is -1 when never set, total -1 when
--          unknown, waiters counts registrations that have not lapsed, ttl_ms is the semaphore
--          key's PTTL (-1: no expiry, -2: no key)
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return {tonumber(redis.call('get', KEYS[1]) or '-1'), tonumber(redis.call('get', KEYS[2]) or '-1'),
  redis.call('zcount', KEYS[3], now_ms + 1, '+inf'), redis.call('pttl', KEYS[1])}
