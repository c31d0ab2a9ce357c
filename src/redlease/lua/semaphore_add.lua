-- Add permits to a semaphore (Redisson RSemaphore addPermits) and wake its waiters.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  total permits (see semaphore_try_set.lua)
-- KEYS[3]  semaphore channel
-- ARGV[1]  permits to add (> 0)
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  the largest count allowed (2**53 - 1: counts are compared as Lua numbers, exact
--          up to there)
-- Reply    {available, total, code}; total is -1 when unknown (the count was set by a Redisson
--          client); code 1: added; -2: the available or total count would pass ARGV[3], and
--          nothing changed
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[3], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
local existed = redis.call('exists', KEYS[1]) == 1
local permits = tonumber(ARGV[1])
local limit = tonumber(ARGV[3])
local now_available = tonumber(redis.call('get', KEYS[1]) or '0')
local now_total = -1
if existed then
  now_total = tonumber(redis.call('get', KEYS[2]) or '-1')
  if now_total >= 0 and now_total < now_available then
    now_total = now_available -- the count went past the total by another client's doing
  end
end
if now_available + permits > limit or (now_total >= 0 and now_total + permits > limit) then
  return {now_available, now_total, -2}
end
local available = redis.call('incrby', KEYS[1], ARGV[1])
local total = -1
if not existed then
  redis.call('set', KEYS[2], available)
  total = available
elseif redis.call('exists', KEYS[2]) == 1 then
  total = now_total + permits
  redis.call('set', KEYS[2], total)
end
redis.pcall(ARGV[2], KEYS[3], available)
return {available, total, 1}
