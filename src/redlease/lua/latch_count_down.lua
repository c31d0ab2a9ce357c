-- Count a latch down by one; at zero delete it and wake every waiter.
-- KEYS[1]  latch key (the count)
-- KEYS[2]  latch channel
-- KEYS[3]  receipt of this request (same hash slot): present once it ran
-- ARGV[1]  how long the receipt is kept, ms
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    the count left (0: the latch is open)
-- At zero it publishes "0" (Redisson's zero-count message, which opens Redisson's waiters and
-- wakes every redlease waiter), then "2" (ignored by Redisson; for older redlease clients, on
-- which a "0" woke one waiter each). A retry of a request that already ran changes nothing.
-- Counting down an open latch does nothing.
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[2], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
if redis.call('exists', KEYS[3]) == 1 then
  return math.max(0, tonumber(redis.call('get', KEYS[1]) or '0'))
end
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
local left = redis.call('decr', KEYS[1])
if left <= 0 then
  redis.call('del', KEYS[1])
  redis.pcall(ARGV[2], KEYS[2], '0')
  redis.pcall(ARGV[2], KEYS[2], '2')
  left = 0
end
redis.call('set', KEYS[3], 1, 'px', ARGV[1])
return left
