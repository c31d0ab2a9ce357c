-- Release one hold of a fair lock in Redisson's RedissonFairLock layout; the last one frees
-- it and wakes the first waiter in line, on that waiter's own channel, as Redisson does.
-- KEYS[1]  lock key (hash {owner field -> hold count})
-- KEYS[2]  Redisson's line (list of owner fields, see redisson_fair_acquire.lua)
-- KEYS[3]  Redisson's places (zset {owner field -> when its place lapses, epoch ms})
-- KEYS[4]  Redisson's unlock channel "redisson_lock__channel:{<name>}": each waiter listens
--          on it followed by ":<owner field>"
-- KEYS[5]  release receipt key (same hash slot): remembers the request id of a final release
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller believes it has
-- ARGV[3]  request id (unique per release call, reused by a retry of the same call)
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[5]  1 when the owner's last re-entrant acquire had an unknown outcome (its reply was
--          lost), so the count may be one above what it believes: that hold goes too; else 0
-- ARGV[6]  the fencing token of the caller's hold: a release acts only on the hold with that
--          token (field "redlease:fence"), never on another hold of the same owner field (a
--          stale copy after a failover to a replica that missed the owner's release and its
--          next acquire)
--          (no caller sends 0; a hold without a stored token matches no token)
-- Reply    {code, hold_count}
--   1 RELEASED  hold_count is what remains (the caller's count less one); 0 means the lock
--               was freed and the first live waiter woken ("0" on its channel)
--  -1 LOST      the caller's hold is gone (lease expired, force-released, or the hold there
--               has another token); nothing changed, but a free lock's first waiter is woken
--               (as Redisson's unlock does)
-- A retry of a release that already ran answers RELEASED again and changes nothing: the
-- receipt of a final release is kept for 30 s (RECEIPT_MS). Lapsed places leave the line
-- from its head first (server clock). The wake-up is a hint, sent by pcall: a user the server
-- does not let publish still gets the release done (waiters re-check on their own).
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[4] must be publish or spublish')
end
local function wake_first()
  local now = redis.call('time')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  for _ = 1, 100 do
    local head = redis.call('lindex', KEYS[2], 0)
    if not head then
      return
    end
    local lapses = redis.call('zscore', KEYS[3], head)
    if lapses and tonumber(lapses) > now_ms then
      -- the one name built in a script: Redisson's channel of the waiter whose turn it is
      redis.pcall(ARGV[4], KEYS[4] .. ':' .. head, '0')
      return
    end
    redis.call('zrem', KEYS[3], head)
    redis.call('lpop', KEYS[2])
  end
end
local expected = tonumber(ARGV[2])
local fields = redis.call('hmget', KEYS[1], ARGV[1], 'redlease:fence')
local count = tonumber(fields[1] or '0')
if count > 0 and tonumber(fields[2] or '-1') ~= tonumber(ARGV[6]) then
  count = 0 -- another hold of this owner field than the caller's
end
if expected > 0 and count >= expected and count <= expected + tonumber(ARGV[5]) then
  if expected > 1 then
    redis.call('hset', KEYS[1], ARGV[1], expected - 1)
    return {1, expected - 1}
  end
  redis.call('del', KEYS[1])
  redis.call('set', KEYS[5], ARGV[3], 'px', 30000)
  wake_first()
  return {1, 0}
end
if count > 0 and count == expected - 1 then
  return {1, count}
end
if count == 0 and expected == 1 and redis.call('get', KEYS[5]) == ARGV[3] then
  return {1, 0}
end
if redis.call('exists', KEYS[1]) == 0 then
  wake_first()
end
return {-1, count}
