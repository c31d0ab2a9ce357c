-- Delete a count-down latch (Redisson RCountDownLatch delete), which opens it: every waiter
-- of every client is woken and finds it open.
-- KEYS[1]  latch key (the count)
-- KEYS[2]  latch channel
-- KEYS[3]  receipt of this request (same hash slot): present once it ran
-- ARGV[1]  how long the receipt is kept, ms
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    1 when the latch existed (and is deleted now), 0 when it did not; a retry of a
--          request that already ran answers 1 again
-- It publishes "0" (Redisson's zero-count message: Redisson's waiters re-check and find the
-- latch open, and so do redlease's) then "2", as a count-down to zero does. Redisson's own
-- delete publishes its new-count message "1", which wakes redlease's waiters (any message on
-- a latch channel does) and none of Redisson's.
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
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
redis.pcall(ARGV[2], KEYS[2], '0')
redis.pcall(ARGV[2], KEYS[2], '2')
redis.call('set', KEYS[3], 1, 'px', ARGV[1])
return 1
