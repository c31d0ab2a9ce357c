-- An acquire call on a read-write lock kept in Redisson's layout gives up (timeout,
-- cancellation, error, a reply it could not read): it gives back a first hold made for that
-- very call (a grant whose reply was lost), never an outer hold of a re-entering owner nor a
-- hold of a later call that this request, delivered late, would otherwise free. The hold goes
-- as its final release would (redisson_rw_read_release.lua, redisson_rw_write_release.lua);
-- Redisson's layout has no line to leave.
-- KEYS[1]  the lock: a hash {"mode" -> "read" or "write", reader field -> read hold count,
--          "<field>:write" -> write hold count}; its TTL is the longest lease of any hold
-- KEYS[2]  the lock's channel "redisson_rwlock:<tagged name>"
-- KEYS[3]  tokens: hash {field -> fencing token of its first hold, "wait:<field>" -> the wait
--          id of the call its first hold was made for} (redlease's own key)
-- KEYS[4]  the prefix of every hold's lease key, "<tagged name>:" (a read hold's lease key is
--          "<prefix><field>:rwlock_timeout:<n>", named in the script as Redisson's are)
-- ARGV[1]  the caller's field on its side: "<client-id>:<thread-id>" for a read hold, that
--          followed by ":write" for a write hold
-- ARGV[2]  side: "read" or "write"
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[4]  the wait id of the acquire call that gives up: a hold is given back only if it is
--          a first hold (count 1) made for that call
-- Reply    1 when a hold made for the call was given back, else 0
-- The wake-up it publishes is a hint, sent by pcall: a user the server does not let publish
-- still gets this done (waiters re-check on their own).
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[3] must be publish or spublish')
end
local function hold_key(field, n) -- Redisson names each read hold's lease key this way
  return KEYS[4] .. field .. ':rwlock_timeout:' .. n
end
local field = ARGV[1]
local wait_field = 'wait:' .. field
if redis.call('hget', KEYS[1], field) ~= '1' or redis.call('hget', KEYS[3], wait_field) ~= ARGV[4] then
  return 0
end
redis.call('hdel', KEYS[1], field)
redis.call('hdel', KEYS[3], field, wait_field)
if ARGV[2] == 'write' then
  if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
  else
    redis.call('hset', KEYS[1], 'mode', 'read') -- the owner's own read holds stay
  end
  redis.pcall(ARGV[3], KEYS[2], '1')
  return 1
end
redis.call('del', hold_key(field, 1))
if redis.call('hlen', KEYS[1]) > 1 then
  -- others hold: the lock lasts as long as the longest lease among their read holds
  local longest = -2
  for _, other in ipairs(redis.call('hkeys', KEYS[1])) do
    local holds = tonumber(redis.call('hget', KEYS[1], other))
    if holds then
      for n = holds, 1, -1 do
        longest = math.max(longest, redis.call('pttl', hold_key(other, n)))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return 1
  end
  if redis.call('hget', KEYS[1], 'mode') == 'write' then
    return 1 -- the writer's (it has no read lease keys)
  end
end
redis.call('del', KEYS[1])
redis.pcall(ARGV[3], KEYS[2], '0')
return 1
