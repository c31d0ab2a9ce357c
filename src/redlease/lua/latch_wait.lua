-- A waiter checks a latch's count; while it is not zero the waiter is registered.
-- KEYS[1]  latch key (the count)
-- KEYS[2]  waiters: zset {owner field -> when its registration lapses, ms (server clock)}
-- ARGV[1]  owner field of the waiter
-- ARGV[2]  how long the registration lasts, ms (0: do not register)
-- Reply    the count (0: open; the waiter's registration is dropped)
local count = math.max(0, tonumber(redis.call('get', KEYS[1]) or '0'))
local registration_ms = tonumber(ARGV[2])
if count == 0 then
  redis.call('zrem', KEYS[2], ARGV[1])
elseif registration_ms > 0 then
  local now = redis.call('time')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('zremrangebyscore', KEYS[2], '-inf', now_ms)
  redis.call('zadd', KEYS[2], now_ms + registration_ms, ARGV[1])
  redis.call('pexpire', KEYS[2], registration_ms)
end
return count
