-- A waiter gives up (timeout, cancellation, error): it leaves Redisson's line as Redisson's
-- acquireFailed does, gives back a hold made for that very call, and wakes the first waiter
-- when the lock is free and the turn was the leaver's.
-- KEYS[1]  lock key
-- KEYS[2]  Redisson's line (list of owner fields)
-- KEYS[3]  Redisson's places (zset {owner field -> when its place lapses, epoch ms})
-- KEYS[4]  Redisson's unlock channel; a waiter listens on it followed by ":<owner field>"
-- ARGV[1]  owner field of the waiter
-- ARGV[2]  the waiter's wait, ms (as it gave redisson_fair_acquire.lua): every place behind
--          its own moves up by it (Redisson's rule)
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[4]  the wait id of the acquire call that gives up: a hold is given back only if it
--          was made for that call (a grant whose reply was lost), never an outer hold of a
--          re-entering owner nor a later call's
-- Reply    1 when a hold made for the call was given back, else 0
-- The wake-up is a hint, sent by pcall (waiters re-check on their own).
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[3] must be publish or spublish')
end
local line = redis.call('lrange', KEYS[2], 0, -1)
local first = line[1] == ARGV[1]
local found = false
for i = 1, #line do
  if found then
    redis.call('zincrby', KEYS[3], -tonumber(ARGV[2]), line[i])
  elseif line[i] == ARGV[1] then
    found = true
  end
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('lrem', KEYS[2], 0, ARGV[1])
local gave_back = 0
if redis.call('hget', KEYS[1], ARGV[1]) == '1'
    and redis.call('hget', KEYS[1], 'redlease:wait') == ARGV[4] then
  redis.call('del', KEYS[1])
  gave_back = 1
end
if (gave_back == 1 or first) and redis.call('exists', KEYS[1]) == 0 then
  local now = redis.call('time')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  for _ = 1, 100 do
    local head = redis.call('lindex', KEYS[2], 0)
    if not head then
      break
    end
    local lapses = redis.call('zscore', KEYS[3], head)
    if lapses and tonumber(lapses) > now_ms then
      redis.pcall(ARGV[3], KEYS[4] .. ':' .. head, '0')
      break
    end
    redis.call('zrem', KEYS[3], head)
    redis.call('lpop', KEYS[2])
  end
end
return gave_back
