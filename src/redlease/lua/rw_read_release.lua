-- Release one read hold of a read-write lock; the last reader's release wakes the first
-- writer in line.
-- KEYS[1]  writer: hash {writer, count, deadline, token} (see rw_write_acquire.lua)
-- KEYS[2]  reader hold counts: hash {owner field -> read hold count}
-- KEYS[3]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[4]  reader tokens: hash {owner field -> fencing token, "wait:<owner field>" -> wait id}
-- KEYS[5]  writers' line: zset {owner field -> arrival, us}
-- KEYS[6]  writers' places: zset {owner field -> when its place lapses, ms}
-- KEYS[7]  the lock's channel
-- KEYS[8]  this side's release receipt key for the owner (same hash slot): remembers the
--          request id of its last final read release (the other side has a key of its own)
-- ARGV[1]  owner field
-- ARGV[2]  read hold count the caller believes it has
-- ARGV[3]  request id (unique per release call, reused by a retry of the same call)
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[5]  1 when the owner's last re-entrant read acquire had an unknown outcome (its reply
--          was lost), so the count may be one above what it believes: that hold goes too; else 0
-- ARGV[6]  the fencing token of the caller's read hold: a release acts only on the hold with
--          that token, never on another hold of the same owner field (a stale copy after a
--          failover to a replica that missed the owner's release and its next acquire)
--          (no caller sends 0; a hold without a stored token matches no token)
-- Reply    {code, hold_count}
--   1 RELEASED  hold_count is what remains (0: the caller reads no more)
--  -1 LOST      the caller's read hold is gone (its lease ran out, force-released, or the
--               hold there has another token); nothing changed
-- When no live reader and no writer remains, the owner field of the first live writer in
-- line is published: only that waiter wakes. A retry of a release that already ran answers
-- RELEASED again and changes nothing (the receipt of a final release lasts 30 s).
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[4] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[4], KEYS[7], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[4] .. "' command")
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = ARGV[1]
local expected = tonumber(ARGV[2])
local after = '(' .. now

local count = 0
if tonumber(redis.call('zscore', KEYS[3], owner) or '0') > now
    and tonumber(redis.call('hget', KEYS[4], owner) or '-1') == tonumber(ARGV[6]) then
  count = tonumber(redis.call('hget', KEYS[2], owner) or '0')
end
if expected > 0 and count >= expected and count <= expected + tonumber(ARGV[5]) then
  if expected > 1 then
    redis.call('hset', KEYS[2], owner, expected - 1)
    return {1, expected - 1}
  end
  redis.call('zrem', KEYS[3], owner)
  redis.call('hdel', KEYS[2], owner)
  local wait_field = 'wait:' .. owner
  redis.call('hdel', KEYS[4], owner, wait_field)
  redis.call('set', KEYS[8], ARGV[3], 'px', 30000)
  if redis.call('zcount', KEYS[3], after, '+inf') == 0
      and tonumber(redis.call('hget', KEYS[1], 'deadline') or '0') <= now then
    for _, lapsed in ipairs(redis.call('zrangebyscore', KEYS[6], '-inf', now, 'LIMIT', 0, 64)) do
      redis.call('zrem', KEYS[5], lapsed)
      redis.call('zrem', KEYS[6], lapsed)
    end
    for _ = 1, 16 do
      local head = redis.call('zrange', KEYS[5], 0, 0)[1]
      if not head then
        break
      end
      if redis.call('zscore', KEYS[6], head) then
        redis.pcall(ARGV[4], KEYS[7], head)
        break
      end
      redis.call('zrem', KEYS[5], head)
    end
  end
  return {1, 0}
end
if count > 0 and count == expected - 1 then
  return {1, count}
end
if count == 0 and expected == 1 and redis.call('get', KEYS[8]) == ARGV[3] then
  return {1, 0}
end
return {-1, count}
