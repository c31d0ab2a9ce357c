-- Release one read hold of a read-write lock kept in Redisson's RReadWriteLock layout.
-- KEYS[1]  the lock: a hash {"mode" -> "read" or "write", reader field -> read hold count,
--          "<field>:write" -> write hold count}; its TTL is the longest lease of any hold
-- KEYS[2]  the lock's channel "redisson_rwlock:<tagged name>"
-- KEYS[3]  the owner's release receipt for this side (redlease's own key, same hash slot):
--          the request id of its last final read release
-- KEYS[4]  tokens: hash {field -> fencing token of its first hold, "wait:<field>" -> wait id}
--          (redlease's own key)
-- KEYS[5]  the prefix of every hold's lease key, "<tagged name>:" (a hold's lease key is
--          "<prefix><field>:rwlock_timeout:<n>", named in the script as Redisson's are)
-- ARGV[1]  owner field
-- ARGV[2]  read hold count the caller believes it has
-- ARGV[3]  request id (unique per release call, reused by a retry of the same call)
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[5]  1 when the owner's last re-entrant read acquire had an unknown outcome (its reply
--          was lost), so the count may be one above what it believes: that hold goes too; else 0
-- ARGV[6]  the fencing token of the caller's read hold: a release acts only on the hold with
--          that token (in the tokens hash), never on another hold of the same field (a stale
--          copy after a failover to a replica that missed the owner's release and its next
--          acquire)
--          (no caller sends 0; a hold without a stored token matches no token)
-- Reply    {code, hold_count}
--   1 RELEASED  hold_count is what remains of the owner's read holds
--  -1 LOST      the caller's read hold is gone (the lock expired, or was force-released, or
--               the hold there has another token); nothing changed
-- When the owner's last read hold goes, the lock lives on for the longest lease left among
-- the other holds; with none left it is deleted and "0" published (Redisson's unlock message:
-- it wakes one waiter per client). A retry of a release that already ran answers RELEASED
-- again and changes nothing (the receipt lasts 30 s).
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[4] must be publish or spublish')
end
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[4], KEYS[2], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[4] .. "' command")
end
local function hold_key(field, n) -- Redisson names each read hold's lease key this way
  return KEYS[5] .. field .. ':rwlock_timeout:' .. n
end
local owner = ARGV[1]
local expected = tonumber(ARGV[2])
local count = tonumber(redis.call('hget', KEYS[1], owner) or '0')
if count > 0 and tonumber(redis.call('hget', KEYS[4], owner) or '-1') ~= tonumber(ARGV[6]) then
  count = 0 -- another hold of this field than the caller's
end
if expected > 0 and count >= expected and count <= expected + tonumber(ARGV[5]) then
  for n = count, expected, -1 do
    redis.call('del', hold_key(owner, n))
  end
  if expected > 1 then
    redis.call('hset', KEYS[1], owner, expected - 1)
    return {1, expected - 1}
  end
  redis.call('hdel', KEYS[1], owner)
  local wait_field = 'wait:' .. owner
  redis.call('hdel', KEYS[4], owner, wait_field)
  redis.call('set', KEYS[3], ARGV[3], 'px', 30000)
  if redis.call('hlen', KEYS[1]) > 1 then
    -- others hold: the lock lasts as long as the longest lease among their read holds
    local longest = -2
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
      local holds = tonumber(redis.call('hget', KEYS[1], field))
      if holds then
        for n = holds, 1, -1 do
          longest = math.max(longest, redis.call('pttl', hold_key(field, n)))
        end
      end
    end
    if longest > 0 then
      redis.call('pexpire', KEYS[1], longest)
      return {1, 0}
    end
    if redis.call('hget', KEYS[1], 'mode') == 'write' then
      return {1, 0} -- the writer's (it has no read lease keys)
    end
  end
  redis.call('del', KEYS[1])
  redis.pcall(ARGV[4], KEYS[2], '0')
  return {1, 0}
end
if count > 0 and count == expected - 1 then
  return {1, count}
end
if count == 0 and expected == 1 and redis.call('get', KEYS[3]) == ARGV[3] then
  return {1, 0}
end
return {-1, count}
