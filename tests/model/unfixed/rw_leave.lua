-- A writer gives up waiting (timeout, cancellation, error): it leaves the line, and if it
-- was first in line, the next writer in line or (with nobody left in line) the readers wake.
-- KEYS[1]  writer: hash {writer, count, deadline, token} (see rw_write_acquire.lua)
-- KEYS[2]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[3]  writers' line: zset {owner field -> arrival, us}
-- KEYS[4]  writers' places: zset {owner field -> when its place lapses, ms}
-- KEYS[5]  the lock's channel
-- ARGV[1]  owner field of the waiter
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    1 when the waiter was first in line, else 0
-- The wake-up it publishes is a hint, sent by pcall: a user the server does not let publish
-- still gets this done (waiters re-check on their own within 5 s).
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local after = '(' .. now

local function first()
  for _, lapsed in ipairs(redis.call('zrangebyscore', KEYS[4], '-inf', now, 'LIMIT', 0, 64)) do
    redis.call('zrem', KEYS[3], lapsed)
    redis.call('zrem', KEYS[4], lapsed)
  end
  for _ = 1, 16 do
    local head = redis.call('zrange', KEYS[3], 0, 0)[1]
    if not head or redis.call('zscore', KEYS[4], head) then
      return head
    end
    redis.call('zrem', KEYS[3], head)
  end
  return false
end

local was_first = first() == ARGV[1]
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('zrem', KEYS[4], ARGV[1])
if not was_first then
  return 0
end
local writing = tonumber(redis.call('hget', KEYS[1], 'deadline') or '0') > now
local head = first()
if not head then
  if not writing then
    redis.pcall(ARGV[2], KEYS[5], '1')
  end
elseif not writing and redis.call('zcount', KEYS[2], after, '+inf') == 0 then
  redis.pcall(ARGV[2], KEYS[5], head)
end
return 1
