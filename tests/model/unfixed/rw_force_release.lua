-- Drop every hold on one side of a read-write lock, whoever holds them, and wake waiters.
-- KEYS[1]  writer: hash {writer, count, deadline, token} (see rw_write_acquire.lua)
-- KEYS[2]  reader hold counts: hash {owner field -> read hold count}
-- KEYS[3]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[4]  reader tokens: hash {owner field -> fencing token}
-- KEYS[5]  the lock's channel
-- ARGV[1]  side: "read" or "write"
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    1 when a live hold was dropped, else 0; "1" is published then (everyone re-checks)
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[5], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local after = '(' .. now
local held
if ARGV[1] == 'write' then
  held = tonumber(redis.call('hget', KEYS[1], 'deadline') or '0') > now
  redis.call('del', KEYS[1])
else
  held = redis.call('zcount', KEYS[3], after, '+inf') > 0
  redis.call('del', KEYS[2], KEYS[3], KEYS[4])
end
if held then
  redis.pcall(ARGV[2], KEYS[5], '1')
  return 1
end
return 0
