-- Make a lease semaphore have a number of permits in all, leased ones included (Redisson
-- RPermitExpirableSemaphore setPermits).
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  leases (zset, see lease_semaphore_acquire.lua)
-- KEYS[3]  semaphore channel
-- ARGV[1]  permits in all (>= 0)
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  the largest count allowed (2**53 - 1); the free count stays within -ARGV[3]..ARGV[3]
-- Reply    {available, code}: code 1 done; -2 the free count would pass -ARGV[3], and
--          nothing changed
-- The free count becomes ARGV[1] less the permits leased now (a lease that ran out is still
-- counted: it comes back by itself), so fewer in all than are leased leaves it below zero
-- until they come back. Running it again changes nothing: a retried request counts once. A
-- count that rose above zero is published.
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[3], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
local existed = redis.call('exists', KEYS[1]) == 1
local available = tonumber(redis.call('get', KEYS[1]) or '0')
local new = tonumber(ARGV[1]) - redis.call('zcard', KEYS[2])
if new < -tonumber(ARGV[3]) then
  return {available, -2}
end
if not existed then
  redis.call('set', KEYS[1], new)
elseif new ~= available then
  redis.call('incrby', KEYS[1], new - available)
end
if new > available and new > 0 then
  redis.pcall(ARGV[2], KEYS[3], new)
end
return {new, 1}
