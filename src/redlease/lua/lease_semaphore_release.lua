-- Give back one permit by its id and wake the waiters.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  leases (zset, see lease_semaphore_acquire.lua)
-- KEYS[3]  semaphore channel; the new count is published, as Redisson does
-- KEYS[4]  receipt of this request (same hash slot): present once it ran
-- ARGV[1]  permit id (16 bytes)
-- ARGV[2]  how long the receipt is kept, ms
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    {code, available}
--   1 RELEASED  done; a retry of a request that already ran answers RELEASED, changing nothing
--   0 UNKNOWN   no such permit: never granted, already released, or expired and given back
--  -1 LOST      the permit's lease had run out (not yet given back): it is given back now
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[3] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[3], KEYS[3], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[3] .. "' command")
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if redis.call('exists', KEYS[4]) == 1 then
  return {1, tonumber(redis.call('get', KEYS[1]) or '0')}
end
local score = redis.call('zscore', KEYS[2], ARGV[1])
if not score then
  return {0, tonumber(redis.call('get', KEYS[1]) or '0')}
end
redis.call('zrem', KEYS[2], ARGV[1])
local available = redis.call('incrby', KEYS[1], 1)
if available > 0 then -- (a count below one, left by permits taken away, wakes no one)
  redis.pcall(ARGV[3], KEYS[3], available)
end
if tonumber(score) <= now_ms then
  return {-1, available}
end
redis.call('set', KEYS[4], 1, 'px', ARGV[2])
return {1, available}
