-- Read a lease semaphore in one step (changes nothing).
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  leases (zset, see lease_semaphore_acquire.lua)
-- KEYS[3]  waiters (zset, see lease_semaphore_acquire.lua)
-- Reply    {available, held, expired, soonest_ms, waiters, set}: available is the count (0
--          when never set; below zero after permits were taken away); held counts permits
--          whose lease has not run out; expired counts run-out ones not yet given back (they
--          are as good as available); soonest_ms is the time until the soonest held lease ends
--          (-1: none held); waiters counts registrations not lapsed; set is 1 when the count
--          key exists, else 0
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local soonest = redis.call('zrangebyscore', KEYS[2], now_ms + 1, '+inf', 'withscores', 'limit', 0, 1)
local soonest_ms = -1
if soonest[2] then
  soonest_ms = tonumber(soonest[2]) - now_ms
end
return {tonumber(redis.call('get', KEYS[1]) or '0'), redis.call('zcount', KEYS[2], now_ms + 1, '+inf'),
  redis.call('zcount', KEYS[2], '-inf', now_ms), soonest_ms,
  redis.call('zcount', KEYS[3], now_ms + 1, '+inf'), redis.call('exists', KEYS[1])}
