-- An acquire call gives up (timeout, cancellation, error, a reply it could not read): a writer
-- leaves the line, and either side gives back a first hold made for that very call (a grant
-- whose reply was lost), never an outer hold of a re-entering owner nor a hold of a later
-- call that this request, delivered late, would otherwise free. If the leaver was first in
-- line or gave a hold back, the next writer in line or (with nobody in line) the readers wake.
-- KEYS[1]  writer: hash {writer, count, deadline, token, wait} (see rw_write_acquire.lua)
-- KEYS[2]  reader hold counts: hash {owner field -> read hold count}
-- KEYS[3]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[4]  reader tokens: hash {owner field -> fencing token, "wait:<owner field>" -> wait id}
-- KEYS[5]  writers' line: zset {owner field -> arrival, us}
-- KEYS[6]  writers' places: zset {owner field -> when its place lapses, ms}
-- KEYS[7]  the lock's channel
-- ARGV[1]  owner field of the caller
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  side of the acquire call: "read" or "write" (only writers wait in line)
-- ARGV[4]  the wait id of the acquire call that gives up: a hold is given back only if it
--          is a first hold (count 1) made for that call
-- Reply    1 when a hold made for the call was given back, else 0
-- The wake-up it publishes is a hint, sent by pcall: a user the server does not let publish
-- still gets this done (waiters re-check on their own within 5 s).
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local after = '(' .. now
local owner = ARGV[1]

local function first()
  for _, lapsed in ipairs(redis.call('zrangebyscore', KEYS[6], '-inf', now, 'LIMIT', 0, 64)) do
    redis.call('zrem', KEYS[5], lapsed)
    redis.call('zrem', KEYS[6], lapsed)
  end
  for _ = 1, 16 do
    local head = redis.call('zrange', KEYS[5], 0, 0)[1]
    if not head or redis.call('zscore', KEYS[6], head) then
      return head
    end
    redis.call('zrem', KEYS[5], head)
  end
  return false
end

local was_first = false
local gave_back = 0
if ARGV[3] == 'write' then
  was_first = first() == owner
  redis.call('zrem', KEYS[5], owner)
  redis.call('zrem', KEYS[6], owner)
  local held = redis.call('hmget', KEYS[1], 'writer', 'count', 'deadline', 'wait')
  if held[1] == owner and held[2] == '1' and tonumber(held[3]) > now and held[4] == ARGV[4] then
    redis.call('del', KEYS[1])
    gave_back = 1
  end
else
  local wait_field = 'wait:' .. owner
  if tonumber(redis.call('zscore', KEYS[3], owner) or '0') > now
      and redis.call('hget', KEYS[2], owner) == '1'
      and redis.call('hget', KEYS[4], wait_field) == ARGV[4] then
    redis.call('zrem', KEYS[3], owner)
    redis.call('hdel', KEYS[2], owner)
    redis.call('hdel', KEYS[4], owner, wait_field)
    gave_back = 1
  end
end
if not was_first and gave_back == 0 then
  return 0
end
if tonumber(redis.call('hget', KEYS[1], 'deadline') or '0') > now then
  return gave_back -- someone writes: its release wakes the others
end
local head = first()
if not head then
  if ARGV[3] == 'write' then
    redis.pcall(ARGV[2], KEYS[7], '1') -- readers held back by the leaver may go
  end
elseif redis.call('zcount', KEYS[3], after, '+inf') == 0 then
  redis.pcall(ARGV[2], KEYS[7], head)
end
return gave_back
