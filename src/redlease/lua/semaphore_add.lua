-- Add permits to a semaphore (Redisson RSemaphore addPermits) and wake its waiters.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  total permits (see semaphore_try_set.lua)
-- KEYS[3]  semaphore channel
-- ARGV[1]  permits to add (> 0)
-- Reply    {available, total}; total is -1 when unknown (the count was set by a Redisson client)
local existed = redis.call('exists', KEYS[1]) == 1
local available = redis.call('incrby', KEYS[1], ARGV[1])
local total = -1
if not existed then
  redis.call('set', KEYS[2], available)
  total = available
elseif redis.call('exists', KEYS[2]) == 1 then
  total = redis.call('incrby', KEYS[2], ARGV[1])
end
redis.call('publish', KEYS[3], available)
return {available, total}
