-- Add permits to a semaphore, or take some away (Redisson RSemaphore addPermits), and wake
-- its waiters when permits became free.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  total permits (see semaphore_try_set.lua)
-- KEYS[3]  semaphore channel
-- KEYS[4]  receipt of this request (same hash slot): present once it ran
-- ARGV[1]  permits to add: a negative count takes permits away (the free count may go below
--          zero, as in Redisson: acquires then wait until releases bring it back up); 0
--          changes no count. A semaphore never set is created, as Redisson does (even by 0).
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  how long the receipt is kept, ms
-- ARGV[4]  the largest count allowed (2**53 - 1: counts are compared as Lua numbers, exact
--          up to there); the free count stays within -ARGV[4]..ARGV[4]
-- Reply    {available, total, code}; total is -1 when unknown (the count was set by a Redisson
--          client, or permits were taken away below none at all); code 1: done (a retry of a
--          request that already ran answers 1 and changes nothing); -2: a count would leave
--          the bounds, and nothing changed
-- A count that rose above zero is published (as a release does); a lower one is not: no
-- waiter could take anything, and a count below one wakes no Redisson waiter.
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
local limit = tonumber(ARGV[4])
local now_available = tonumber(redis.call('get', KEYS[1]) or '0')
local now_total = -1
if existed then
  now_total = tonumber(redis.call('get', KEYS[2]) or '-1')
  if now_total >= 0 and now_total < now_available then
    now_total = now_available -- the count went past the total by another client's doing
  end
end
if redis.call('exists', KEYS[4]) == 1 then
  return {now_available, now_total, 1}
end
local available = now_available + permits
if math.abs(available) > limit or (now_total >= 0 and now_total + permits > limit) then
  return {now_available, now_total, -2}
end
redis.call('incrby', KEYS[1], permits)
local total = -1
if not existed then
  total = available
elseif now_total >= 0 then
  total = now_total + permits
end
if total >= 0 then
  redis.call('set', KEYS[2], total)
else
  -- fewer than none at all (or unknown): the total is unknown from now on
  redis.call('del', KEYS[2])
end
redis.call('set', KEYS[4], 1, 'px', ARGV[3])
if permits > 0 and available > 0 then
  redis.pcall(ARGV[2], KEYS[3], available)
end
return {available, total, 1}
