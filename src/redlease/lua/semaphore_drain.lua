-- Take every permit available now (Redisson RSemaphore drainPermits); returns how many.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  receipt of this request (same hash slot): minus the count once it ran, "0" once it
--          was given up (semaphore_undo.lua), which a late copy of it must not outrun
-- ARGV[1]  how long the receipt is kept, ms
-- Reply    the permits taken (0 when none were free, or the semaphore was never set); a retry
--          of a request that already ran answers the same count and takes nothing more, and a
--          request given up before it ran takes nothing
local done = redis.call('get', KEYS[2])
if done then
  return math.max(0, -tonumber(done))
end
local available = tonumber(redis.call('get', KEYS[1]) or '0')
if available <= 0 then
  return 0
end
redis.call('set', KEYS[1], 0)
redis.call('set', KEYS[2], -available, 'px', ARGV[1])
return available
