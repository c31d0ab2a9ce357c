-- Acquire or re-enter a reentrant lock, in Redisson's RLock layout.
-- KEYS[1]  lock key: a hash {owner field -> hold count}; the lease is the key's TTL
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client-id>:<thread-id>"
-- ARGV[3]  hold count the caller believes it has (0 on a first acquire)
-- Reply    {code, hold_count, ttl_ms}
--   1 GRANTED  hold_count is the new count, ttl_ms the lease now on the key
--   0 HELD     another owner holds it (or it is reserved for a woken waiter); ttl_ms is its
--              remaining lease (-1: no expiry)
--  -1 LOST     the caller believed it held the lock, but its hold is gone
-- A retried request (the reply was lost, the same request arrives again) finds the count one
-- above what the caller believes and answers GRANTED without counting a second hold.
local expected = tonumber(ARGV[3])
local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0')
if count == expected + 1 then
  return {1, count, redis.call('pttl', KEYS[1])}
end
if count ~= expected then
  return {-1, count, redis.call('pttl', KEYS[1])}
end
local lease = tonumber(ARGV[1])
if count == 0 then
  if redis.call('exists', KEYS[1]) == 1 then
    -- a hand-off reservation (see lock_release.lua) admits any owner but the one that left
    local from = redis.call('hget', KEYS[1], 'redlease:handoff')
    if (not from) or from == ARGV[2] or redis.call('hlen', KEYS[1]) ~= 1 then
      return {0, 0, redis.call('pttl', KEYS[1])}
    end
    redis.call('del', KEYS[1])
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], lease)
  return {1, 1, lease}
end
redis.call('hincrby', KEYS[1], ARGV[2], 1)
local ttl = redis.call('pttl', KEYS[1])
if ttl < lease then
  -- a re-entry never shortens the lease that the outer hold has
  redis.call('pexpire', KEYS[1], lease)
  ttl = lease
end
return {1, count + 1, ttl}
