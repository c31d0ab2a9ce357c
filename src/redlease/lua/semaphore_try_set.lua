-- Set a semaphore's permits only if they were never set (Redisson RSemaphore trySetPermits).
-- KEYS[1]  semaphore key: a string, the permits available now (Redisson's layout)
-- KEYS[2]  total permits: what was set plus what was added since (same hash slot, no expiry)
-- KEYS[3]  semaphore channel "redisson_sc:{<name>}"
-- KEYS[4]  receipt of this request (same hash slot): present once it set the permits
-- ARGV[1]  permits
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  how long the receipt is kept, ms
-- Reply    1 when set (the new count is published, waking waiters), 0 when already set; a
--          retry of the request that set them answers 1 again and changes nothing
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[3], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
if redis.call('exists', KEYS[4]) == 1 then
  return 1
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], ARGV[1])
redis.call('set', KEYS[4], 1, 'px', ARGV[3])
redis.pcall(ARGV[2], KEYS[3], ARGV[1])
return 1
