-- Set a count-down latch's count only if it is not set (Redisson RCountDownLatch trySetCount).
-- KEYS[1]  latch key: a string, the count (Redisson's layout; no key means count 0, open)
-- KEYS[2]  latch channel "redisson_countdownlatch__channel__{<name>}"
-- ARGV[1]  count (> 0)
-- Reply    1 when set ("1", Redisson's new-count message, is published), 0 when already set
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], '1')
return 1
