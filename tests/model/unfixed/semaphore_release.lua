-- Give permits back to a semaphore (Redisson RSemaphore release) and wake its waiters.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  total permits (see semaphore_try_set.lua)
-- KEYS[3]  semaphore channel; the new count is published, as Redisson does
-- KEYS[4]  receipt of this request (same hash slot): present once it ran
-- ARGV[1]  permits to give back
-- ARGV[2]  how long the receipt is kept, ms
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    {code, available, total}; total is -1 when unknown
--   1 RELEASED  done; a retry of a request that already ran answers RELEASED and changes nothing
--  -2 TOO_MANY  the count would pass 2^53 - 1 (limits.MAX_COUNT: counts are compared as Lua
--               numbers, exact up to there); nothing changed
-- As in Redisson (whose release has no upper bound, and whose addPermits changes only the
-- count), a release is never refused for giving back more than was taken: the total follows
-- the count up, so no permit is ever lost to a stale total.
--  -3 NOT_SET   the semaphore has no permits at all (never set): nothing was taken; unchanged
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[3] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[3], KEYS[3], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[3] .. "' command")
end
local available = tonumber(redis.call('get', KEYS[1]) or '0')
local total = tonumber(redis.call('get', KEYS[2]) or '-1')
if redis.call('exists', KEYS[4]) == 1 then
  return {1, available, total}
end
if total < 0 and redis.call('exists', KEYS[1]) == 0 then
  return {-3, 0, -1}
end
local permits = tonumber(ARGV[1])
if available + permits > 9007199254740991 then
  return {-2, available, total}
end
available = redis.call('incrby', KEYS[1], permits)
if total >= 0 and available > total then
  total = available
  redis.call('set', KEYS[2], total)
end
redis.call('set', KEYS[4], 1, 'px', ARGV[2])
if available > 0 then -- (a count below one, left by permits taken away, wakes no one)
  redis.pcall(ARGV[3], KEYS[3], available)
end
return {1, available, total}
