-- Add permits to a lease semaphore, or take some away (Redisson RPermitExpirableSemaphore
-- addPermits), and wake its waiters when permits became free.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  semaphore channel
-- KEYS[3]  receipt of this request (same hash slot): present once it ran
-- ARGV[1]  permits to add: a negative count takes permits away (the free count may go below
--          zero, as in Redisson); 0 changes no count. A semaphore never set is created.
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  how long the receipt is kept, ms
-- ARGV[4]  the largest count allowed (2**53 - 1); the free count stays within -ARGV[4]..ARGV[4]
-- Reply    {available, code}: code 1 done (a retry of a request that already ran answers 1
--          and changes nothing); -2 the count would pass ARGV[4], and nothing changed
-- A count that rose above zero is published; a lower one is not (no waiter could take
-- anything, and a count below one wakes no Redisson waiter).
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[2], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
local available = tonumber(redis.call('get', KEYS[1]) or '0')
if redis.call('exists', KEYS[3]) == 1 then
  return {available, 1}
end
local permits = tonumber(ARGV[1])
local new = available + permits
if math.abs(new) > tonumber(ARGV[4]) then
  return {available, -2}
end
redis.call('incrby', KEYS[1], permits)
redis.call('set', KEYS[3], 1, 'px', ARGV[3])
if permits > 0 and new > 0 then
  redis.pcall(ARGV[2], KEYS[2], new)
end
return {new, 1}
