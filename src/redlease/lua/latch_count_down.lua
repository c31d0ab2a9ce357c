-- Count a latch down by one; at zero delete it and wake every waiter.
-- KEYS[1]  latch key (the count)
-- KEYS[2]  latch channel
-- KEYS[3]  receipt of this request (same hash slot): present once it ran
-- ARGV[1]  how long the receipt is kept, ms
-- Reply    the count left (0: the latch is open)
-- At zero it publishes "0" (Redisson's zero-count message, which opens Redisson's waiters and
-- wakes one waiter of each redlease client), then "2" (ignored by Redisson, wakes every redlease
-- waiter). A retry of a request that already ran changes nothing. Counting down an open latch
-- does nothing.
if redis.call('exists', KEYS[3]) == 1 then
  return math.max(0, tonumber(redis.call('get', KEYS[1]) or '0'))
end
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
local left = redis.call('decr', KEYS[1])
if left <= 0 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '0')
  redis.call('publish', KEYS[2], '2')
  left = 0
end
redis.call('set', KEYS[3], 1, 'px', ARGV[1])
return left
