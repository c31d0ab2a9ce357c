-- Take permits from a semaphore if enough are available (Redisson RSemaphore tryAcquire).
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  total permits (see semaphore_try_set.lua)
-- KEYS[3]  waiters: zset {owner field -> when its registration lapses, ms (server clock)}
-- KEYS[4]  receipt of this request (same hash slot): '1' once it was granted, '0' once it was
--          given up (semaphore_undo.lua), which a late copy of it must not outrun
-- ARGV[1]  permits to take
-- ARGV[2]  owner field of the caller "<client-id>:<owner-id>"
-- ARGV[3]  how long the caller's registration as a waiter lasts, ms (0: do not register)
-- ARGV[4]  how long the receipt is kept, ms
-- Reply    {code, available, total}; total is -1 when unknown
--   1 GRANTED   the permits were taken; a retry of a granted request (same receipt key) answers
--               GRANTED again and takes nothing
--   0 SHORT     not enough permits now (or none were ever set); a registering caller now
--               counts as a waiter
--  -2 TOO_MANY  more permits asked than the semaphore has in total: nothing taken
--  -4 UNDONE    this request was given up before it got here: it takes nothing
local permits = tonumber(ARGV[1])
local available = tonumber(redis.call('get', KEYS[1]) or '0')
local total = tonumber(redis.call('get', KEYS[2]) or '-1')
local receipt = redis.call('get', KEYS[4])
if receipt == '1' then
  return {1, available, total}
elseif receipt then
  return {-4, available, total}
end
if total >= 0 and available > total then
  -- another client raised the count past the total (Redisson's addPermits or release change
  -- only the count): the total follows it
  total = available
  redis.call('set', KEYS[2], total)
end
if total >= 0 and permits > total then
  return {-2, available, total}
end
if available >= permits then
  available = redis.call('decrby', KEYS[1], permits)
  redis.call('set', KEYS[4], 1, 'px', ARGV[4])
  redis.call('zrem', KEYS[3], ARGV[2])
  return {1, available, total}
end
local registration_ms = tonumber(ARGV[3])
if registration_ms > 0 then
  local now = redis.call('time')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('zremrangebyscore', KEYS[3], '-inf', now_ms)
  redis.call('zadd', KEYS[3], now_ms + registration_ms, ARGV[2])
  redis.call('pexpire', KEYS[3], registration_ms)
end
return {0, available, total}
