
-- tryLockInnerAsync(EVAL_LONG): the try of lock() and tryLock(wait).
-- KEYS: lock, line, places. ARGV: lease ms, field, wait ms, now ms (the JVM's clock)
-- Reply: nil = held now; else ms to wait (the place before ours, or the holder's TTL)
local lock, line, places = KEYS[1], KEYS[2], KEYS[3]
local lease, me, wait, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
drop_lapsed(line, places, now)
local first = redis.call('lindex', line, 0)
if redis.call('exists', lock) == 0 and (not first or first == me) then
  take(lock, line, places, me, lease, wait)
  return nil
end
if redis.call('hexists', lock, me) == 1 then
  redis.call('hincrby', lock, me, 1)
  redis.call('pexpire', lock, lease)
  return nil
end
if redis.call('zscore', places, me) then
  return math.max(0, redis.call('pttl', lock))
end
local ttl
local last = redis.call('lindex', line, -1)
local before = last and last ~= me and redis.call('zscore', places, last)
if before then
  ttl = tonumber(before) - now
else
  ttl = redis.call('pttl', lock)
end
if redis.call('zadd', places, ttl + wait + now, me) == 1 then
  redis.call('rpush', line, me)
end
return ttl
