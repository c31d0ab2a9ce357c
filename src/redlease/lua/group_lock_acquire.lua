-- Acquire or re-enter a group lock: many values of one group locked all-or-nothing, in
-- Redisson's RFasterMultiLock layout (one hash per group; no value is taken unless all are).
-- KEYS[1]  the group's hash. Per value, Redisson's fields (the value's field name is
--          Redisson's hash of the value: see _core/group.py):
--            <value>                            -> the holder's owner field
--            <value>:<owner>:expire_time        -> when its hold of the value ends (ms since
--                                                  the epoch; Redisson writes its client's
--                                                  clock, redlease the server's TIME)
--            <value>:<owner>:lock_count         -> its hold count on the value
--          and per redlease hold (an owner's hold of one set of values), fields Redisson
--          ignores: "redlease:hold:<owner>:<set id>" -> "<count> <wait id>" and
--          "redlease:fence:<owner>:<set id>" -> the hold's fencing token.
--          The key's TTL is the longest lease on it.
-- KEYS[2]  fencing counter: Redisson's token key of the group, redisson_lock_token:{group}
--          (see lock_acquire.lua: the same rule, max(counter + 1, server time in us))
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client-id>:<thread-id>"
-- ARGV[3]  hold count the caller believes it has on this set (0 on a first acquire)
-- ARGV[4]  wait id (unique per acquire call; its retries reuse it)
-- ARGV[5]  the fencing token of the caller's hold (0 on a first acquire)
-- ARGV[6]  set id: names the set of values (the same for every client locking that set)
-- ARGV[7..] the values' field names
-- Reply    {code, hold_count, ttl_ms, token}
--   1 GRANTED  every value is the caller's: hold_count its new count, ttl_ms the shortest
--              lease left on its values, token the hold's fencing token
--   0 HELD     some value is another owner's, live: nothing was changed; ttl_ms the longest
--              time left on those holds (the wait bound), token the last one handed out
--  -1 LOST     the caller believed it held the set, but its hold is gone (a value is no
--              longer its own and live, or the hold there has another token); hold_count is
--              the count on the server, 0 when the hold there is not the caller's
-- All or nothing: the values are all checked before any is written. A value held by another
-- owner whose expire_time has passed is free (its fields go). Retries: a first acquire that
-- finds a live hold of the owner's on the set made for this very call (its wait id) takes it
-- as its own retry; one made for another call is re-leased to this one (count 1, a fresh
-- token). A re-entry's retry finds the count one above what the caller believes (same token).
-- Hot path (free values): time, 1 + 3 reads per value, 3 writes per value, set, pexpire.
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local lease = tonumber(ARGV[1])
local owner = ARGV[2]
local expected = tonumber(ARGV[3])
local mine = tonumber(ARGV[5])
local hold_field = 'redlease:hold:' .. owner .. ':' .. ARGV[6]
local fence_field = 'redlease:fence:' .. owner .. ':' .. ARGV[6]
local found = redis.call('hmget', KEYS[1], hold_field, fence_field)
local record = found[1]
local token, count, wait = tonumber(found[2] or '0'), 0, ''
if record then
  local c, w = string.match(record, '^(%d+) (%S*)$')
  count, wait = tonumber(c), w
end
-- each value: another owner's live hold (the longest time left on one), or the caller's
local busy, ours, shortest = -1, true, nil
for i = 7, #ARGV do
  local holder = redis.call('hget', KEYS[1], ARGV[i])
  if holder then
    local ends = tonumber(redis.call('hget', KEYS[1], ARGV[i] .. ':' .. holder .. ':expire_time')
      or '0')
    if holder ~= owner then
      ours = false
      if ends > now_ms then
        busy = math.max(busy, ends - now_ms)
      end
    elseif ends < now_ms then
      ours = false
    else
      shortest = math.min(shortest or ends, ends)
    end
  else
    ours = false
  end
end
local held = record and ours
if expected > 0 then
  if not held or (mine ~= 0 and token ~= mine) then
    return {-1, 0, busy, 0}
  end
  if count == expected + 1 then -- a retry of a re-entry that was counted
    return {1, count, shortest - now_ms, token}
  end
  if count ~= expected then
    return {-1, count, busy, 0}
  end
elseif held and count == 1 and wait == ARGV[4] then -- made for this very call: its retry
  return {1, 1, shortest - now_ms, token}
end
if busy >= 0 then
  local last = redis.call('get', KEYS[2])
  return {0, 0, busy, tonumber(last or '0')}
end
local step = 1 -- what each value's count goes up by
if expected == 0 then
  if held then
    step = 1 - count -- a hold of this owner's made for another call: re-leased, count 1
  end
  local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('get', KEYS[2]) or '0')
  token = math.max(last + 1, token + 1, clock)
  redis.call('set', KEYS[2], token)
  count, wait = 0, ARGV[4]
end
local ends = now_ms + lease
for i = 7, #ARGV do
  local holder = redis.call('hget', KEYS[1], ARGV[i])
  if holder and holder ~= owner then -- another owner's hold that ran out: it goes
    redis.call('hdel', KEYS[1], ARGV[i] .. ':' .. holder .. ':expire_time',
      ARGV[i] .. ':' .. holder .. ':lock_count')
  end
  local prefix = ARGV[i] .. ':' .. owner
  local before = tonumber(redis.call('hget', KEYS[1], prefix .. ':expire_time') or '0')
  if holder ~= owner or before < now_ms then -- (a count left by a hold that ran out goes)
    redis.call('hdel', KEYS[1], prefix .. ':lock_count')
  end
  redis.call('hset', KEYS[1], ARGV[i], owner, prefix .. ':expire_time', math.max(before, ends))
  if redis.call('hincrby', KEYS[1], prefix .. ':lock_count', step) < 1 then
    redis.call('hset', KEYS[1], prefix .. ':lock_count', 1)
  end
end
redis.call('hset', KEYS[1], hold_field, (count + 1) .. ' ' .. wait, fence_field, token)
if redis.call('pttl', KEYS[1]) < lease then
  redis.call('pexpire', KEYS[1], lease)
end
return {1, count + 1, lease, token}
