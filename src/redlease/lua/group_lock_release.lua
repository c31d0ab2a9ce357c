-- Release one hold of a group lock (see group_lock_acquire.lua); the last one frees its values
-- and wakes the waiters ("0" on the group's unlock channel, as Redisson does).
-- KEYS[1]  the group's hash
-- KEYS[2]  unlock channel "redisson_lock__channel:{<group>}"
-- KEYS[3]  this release's receipt: Redisson's unlock latch key of the request,
--          "redisson_unlock_latch:{<group>}:<request id>" (a retry of the same request finds
--          it: the release is not done twice)
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller believes it has
-- ARGV[3]  the fencing token of the caller's hold (0: not known: the owner field decides)
-- ARGV[4]  1 when the owner's last re-entry had an unknown outcome (the count may be one
--          above what it believes: that hold goes too); else 0
-- ARGV[5]  publish command: 'publish' or 'spublish' (anything else is refused before any
--          change)
-- ARGV[6]  set id (see group_lock_acquire.lua)
-- ARGV[7]  receipt lifetime in milliseconds
-- ARGV[8..] the values' field names
-- Reply    {code, hold_count}
--   1 RELEASED  hold_count is what remains (0: the values are free and waiters woken)
--  -1 LOST      the caller's hold is gone (a value is no longer its own and live, or the
--               hold there has another token); nothing changed
if ARGV[5] ~= 'publish' and ARGV[5] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[5] must be publish or spublish')
end
local receipt = redis.call('get', KEYS[3])
if receipt then
  return {1, tonumber(receipt)}
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local owner = ARGV[1]
local expected = tonumber(ARGV[2])
local hold_field = 'redlease:hold:' .. owner .. ':' .. ARGV[6]
local fence_field = 'redlease:fence:' .. owner .. ':' .. ARGV[6]
local found = redis.call('hmget', KEYS[1], hold_field, fence_field)
if not found[1] then
  return {-1, 0}
end
local c, w = string.match(found[1], '^(%d+) (%S*)$')
local token, count = tonumber(found[2] or '0'), tonumber(c)
if tonumber(ARGV[3]) ~= 0 and token ~= tonumber(ARGV[3]) then
  return {-1, 0}
end
for i = 8, #ARGV do
  local ends = redis.call('hget', KEYS[1], ARGV[i] .. ':' .. owner .. ':expire_time')
  if redis.call('hget', KEYS[1], ARGV[i]) ~= owner or tonumber(ends or '0') < now_ms then
    return {-1, 0}
  end
end
if expected < 1 or count < expected or count > expected + tonumber(ARGV[4]) then
  return {-1, count}
end
local gone = count - expected + 1 -- the holds that go (two when a re-entry was counted unseen)
local left = count - gone
for i = 8, #ARGV do
  local prefix = ARGV[i] .. ':' .. owner
  if redis.call('hincrby', KEYS[1], prefix .. ':lock_count', -gone) <= 0 then
    redis.call('hdel', KEYS[1], ARGV[i], prefix .. ':expire_time', prefix .. ':lock_count')
  end
end
if left > 0 then
  redis.call('hset', KEYS[1], hold_field, left .. ' ' .. w)
else
  redis.call('hdel', KEYS[1], hold_field, fence_field)
  redis.pcall(ARGV[5], KEYS[2], '0')
end
redis.call('set', KEYS[3], left, 'px', tonumber(ARGV[7]))
return {1, left}
