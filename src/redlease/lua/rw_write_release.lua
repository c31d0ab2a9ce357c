-- Release one write hold of a read-write lock; the last one wakes the first writer in line,
-- or, with nobody in line, every waiting reader.
-- KEYS[1]  writer: hash {writer, count, deadline, token} (see rw_write_acquire.lua)
-- KEYS[2]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[3]  writers' line: zset {owner field -> arrival, us}
-- KEYS[4]  writers' places: zset {owner field -> when its place lapses, ms}
-- KEYS[5]  the lock's channel
-- KEYS[6]  this side's release receipt key for the owner (same hash slot): remembers the
--          request id of its last final write release (the other side has a key of its own)
-- ARGV[1]  owner field
-- ARGV[2]  write hold count the caller believes it has
-- ARGV[3]  request id (unique per release call, reused by a retry of the same call)
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[5]  1 when the owner's last re-entrant write acquire had an unknown outcome (its reply
--          was lost), so the count may be one above what it believes: that hold goes too; else 0
-- ARGV[6]  the fencing token of the caller's write hold: a release acts only on the hold with
--          that token, never on another hold of the same owner field (a stale copy after a
--          failover to a replica that missed the owner's release and its next acquire)
--          (no caller sends 0; a hold without a stored token matches no token)
-- Reply    {code, hold_count}
--   1 RELEASED  hold_count is what remains; 0 means the write lock was freed
--  -1 LOST      the caller's write hold is gone (its lease ran out, force-released, or the
--               hold there has another token); nothing changed
-- Wake-ups: with a live writer in line, its owner field is published (only it wakes), once
-- no reader (the releasing writer's own read holds, after a downgrade) is left; with nobody
-- in line, "1" is published and every waiter re-checks. A retry of a release that already
-- ran answers RELEASED again and changes nothing (the receipt lasts 30 s).
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[4] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[4], KEYS[5], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[4] .. "' command")
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = ARGV[1]
local expected = tonumber(ARGV[2])
local after = '(' .. now

local count = 0
local held = redis.call('hmget', KEYS[1], 'writer', 'deadline', 'count', 'token')
if held[1] == owner and tonumber(held[2]) > now
    and tonumber(held[4] or '-1') == tonumber(ARGV[6]) then
  count = tonumber(held[3])
end
if expected > 0 and count >= expected and count <= expected + tonumber(ARGV[5]) then
  if expected > 1 then
    redis.call('hset', KEYS[1], 'count', expected - 1)
    return {1, expected - 1}
  end
  redis.call('del', KEYS[1])
  redis.call('set', KEYS[6], ARGV[3], 'px', 30000)
  for _, lapsed in ipairs(redis.call('zrangebyscore', KEYS[4], '-inf', now, 'LIMIT', 0, 64)) do
    redis.call('zrem', KEYS[3], lapsed)
    redis.call('zrem', KEYS[4], lapsed)
  end
  local head = false
  for _ = 1, 16 do
    head = redis.call('zrange', KEYS[3], 0, 0)[1]
    if not head or redis.call('zscore', KEYS[4], head) then
      break
    end
    redis.call('zrem', KEYS[3], head)
    head = false
  end
  if not head then
    redis.pcall(ARGV[4], KEYS[5], '1')
  elseif redis.call('zcount', KEYS[2], after, '+inf') == 0 then
    redis.pcall(ARGV[4], KEYS[5], head)
  end
  return {1, 0}
end
if count > 0 and count == expected - 1 then
  return {1, count}
end
if count == 0 and expected == 1 and redis.call('get', KEYS[6]) == ARGV[3] then
  return {1, 0}
end
return {-1, count}
