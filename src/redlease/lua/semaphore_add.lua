-- Add permits to a semaphore (Redisson RSemaphore addPermits) and wake its waiters.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  total permits (see semaphore_try_set.lua)
-- KEYS[3]  semaphore channel
-- ARGV[1]  permits to add (> 0)
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    {available, total}; total is -1 when unknown (the count was set by a Redisson client)
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
local existed = redis.call('exists', KEYS[1]) == 1
local available = redis.call('incrby', KEYS[1], ARGV[1])
local total = -1
if not existed then
  redis.call('set', KEYS[2], available)
  total = available
elseif redis.call('exists', KEYS[2]) == 1 then
  total = redis.call('incrby', KEYS[2], ARGV[1])
end
redis.call(ARGV[2], KEYS[3], available)
return {available, total}
