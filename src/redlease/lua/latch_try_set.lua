-- Set a count-down latch's count only if it is not set (Redisson RCountDownLatch trySetCount).
-- KEYS[1]  latch key: a string, the count (Redisson's layout; no key means count 0, open)
-- KEYS[2]  latch channel "redisson_countdownlatch__channel__{<name>}"
-- KEYS[3]  receipt of this request (same hash slot): present once it set the count
-- ARGV[1]  count (> 0)
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  how long the receipt is kept, ms
-- Reply    1 when set ("1", Redisson's new-count message, is published), 0 when already set;
--          a retry of the request that set it answers 1 again and changes nothing
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[2], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
if redis.call('exists', KEYS[3]) == 1 then
  return 1
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[3])
redis.pcall(ARGV[2], KEYS[2], '1')
return 1
