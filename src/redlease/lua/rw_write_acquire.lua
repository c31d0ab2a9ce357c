-- Take or re-enter the write hold of a read-write lock (many readers or one writer).
-- KEYS[1]  writer: hash {writer, count, deadline (lease end, ms, server clock), token, wait
--          (the wait id of the acquire call its first hold was made for)}
-- KEYS[2]  reader hold counts: hash {owner field -> read hold count}
-- KEYS[3]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[4]  reader tokens: hash {owner field -> fencing token of its read hold,
--          "wait:<owner field>" -> the wait id of the call its first read hold was made for}
-- KEYS[5]  writers' line: zset {owner field -> arrival, us (server clock)}
-- KEYS[6]  writers' places: zset {owner field -> when its place lapses, ms (server clock)}
-- KEYS[7]  fencing counter: the last token handed out for this lock (never expires)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client-id>:<owner-id>"
-- ARGV[3]  write hold count the caller believes it has (0 on a first acquire)
-- ARGV[4]  how long a place in line lasts unless the caller retries, ms (0: no place)
-- ARGV[5]  wait id: unique per acquire call of the owner (its retries reuse it); a first hold
--          records it, so that a waiter giving up gives back only a hold made for that very
--          call (rw_leave.lua)
-- ARGV[6]  the fencing token of the caller's write hold (a re-entry; ignored on a first
--          acquire): a re-entry joins only the hold with that token, never another hold of the
--          same owner field (a stale copy after a failover to a replica that missed the
--          owner's release and its next acquire)
--          (no caller sends 0; a hold without a stored token matches no token)
-- Reply    {code, hold_count, ms, token}
--   1 GRANTED  hold_count is the new count, ms the write lease left, token the hold's token
--   0 HELD     another owner writes or readers read (ms: what is left of the longest of
--              their leases, for the first live place in line and a caller not in line, which
--              so re-checks the moment a dead holder's lease ends; the caller's own lease for a
--              place behind a live one, so the line does not re-check all at once), or a
--              writer ahead in line goes first (ms: -1). A caller that joins the line has a place.
--  -1 LOST     the caller believed it held the write hold, but it is gone (hold_count: the
--              owner's count on the server, 0 when the hold there has another token)
--  -2 UPGRADE  the caller holds a read hold: waiting for the write lock would wait for itself
-- Writers are served in arrival order: a free lock goes to the first live place in line. A
-- place lapses unless its waiter retries in time, so a dead waiter blocks nobody for long.
-- Retries: a first acquire (ARGV[3] = 0) that finds the owner writing takes that hold as its
-- own retry (the reply was lost: GRANTED with the lease left, no second hold counted) only if
-- the hold records this very call's wait id. A hold of the owner made for another call (a
-- wait that gave up and could not give it back, a stale copy after a failover) is re-leased
-- to this call: count 1, a fresh token, this call's wait id and lease. A re-entry's retry
-- finds the count one above what the caller believes (same token); a re-entry that finds a
-- hold of its owner with another token is answered LOST with count 0 (its caller then
-- acquires afresh).
-- Fencing: every token handed out is max(last token + 1, the hold's token + 1, server time in
-- microseconds), and the counter is set to it: tokens keep increasing after a data loss.
local t = redis.call('time')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local lease = tonumber(ARGV[1])
local owner = ARGV[2]
local expected = tonumber(ARGV[3])
local place_ms = tonumber(ARGV[4])
local after = '(' .. now

local writer = redis.call('hget', KEYS[1], 'writer')
local ends = tonumber(redis.call('hget', KEYS[1], 'deadline') or '0')
if writer and ends <= now then
  redis.call('del', KEYS[1]) -- the writer's lease ran out
  writer = false
end
local count = 0
if writer == owner then
  count = tonumber(redis.call('hget', KEYS[1], 'count'))
end
local function new_token(floor) -- above the counter and floor, not below the clock
  local token = math.max(tonumber(redis.call('get', KEYS[7]) or '0') + 1, floor + 1, now_us)
  redis.call('set', KEYS[7], token)
  return token
end
if expected == 0 and count > 0 then
  redis.call('zrem', KEYS[5], owner)
  redis.call('zrem', KEYS[6], owner)
  local held = redis.call('hmget', KEYS[1], 'token', 'wait')
  if count == 1 and held[2] == ARGV[5] then -- made for this very call: its retry
    return {1, 1, ends - now, tonumber(held[1] or '0')}
  end
  -- a hold of this owner made for another call: re-leased to this one
  local token = new_token(tonumber(held[1] or '0'))
  redis.call('hset', KEYS[1], 'count', 1, 'deadline', now + lease, 'token', token,
    'wait', ARGV[5])
  redis.call('pexpire', KEYS[1], lease)
  return {1, 1, lease, token}
end
if expected > 0 and count > 0
    and tonumber(redis.call('hget', KEYS[1], 'token') or '-1') ~= tonumber(ARGV[6]) then
  return {-1, 0, 0, 0} -- another hold of this owner field than the caller's
end
if count == expected + 1 then
  return {1, count, ends - now, tonumber(redis.call('hget', KEYS[1], 'token'))}
end
if count ~= expected then
  return {-1, count, 0, 0}
end
if count > 0 then
  local deadline = math.max(ends, now + lease)
  redis.call('hincrby', KEYS[1], 'count', 1)
  redis.call('hset', KEYS[1], 'deadline', deadline)
  if redis.call('pttl', KEYS[1]) < deadline - now then
    redis.call('pexpire', KEYS[1], deadline - now)
  end
  return {1, count + 1, deadline - now, tonumber(redis.call('hget', KEYS[1], 'token'))}
end

local function join_line()
  if place_ms > 0 then
    redis.call('zadd', KEYS[5], 'NX', now_us, owner)
    redis.call('zadd', KEYS[6], now + place_ms, owner)
    redis.call('pexpire', KEYS[5], place_ms)
    redis.call('pexpire', KEYS[6], place_ms)
  end
end

-- readers whose lease ran out are gone (bounded; liveness is always judged by the lease end)
for _, reader in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now, 'LIMIT', 0, 64)) do
  redis.call('zrem', KEYS[3], reader)
  redis.call('hdel', KEYS[2], reader)
  local waits = 'wait:' .. reader
  redis.call('hdel', KEYS[4], reader, waits)
end
if tonumber(redis.call('zscore', KEYS[3], owner) or '0') > now then
  return {-2, 0, 0, 0}
end
local function held(ms) -- (see the reply) the bound of the caller's wait
  if place_ms > 0 then
    for _, ahead in ipairs(redis.call('zrange', KEYS[5], 0, 3)) do
      if ahead == owner then
        break
      end
      if tonumber(redis.call('zscore', KEYS[6], ahead) or '0') > now then
        return {0, 0, lease, 0} -- behind a live place
      end
    end
  end
  return {0, 0, ms, 0}
end
if writer then
  join_line()
  return held(ends - now)
end
if redis.call('zcount', KEYS[3], after, '+inf') > 0 then
  join_line()
  local last = redis.call('zrange', KEYS[3], -1, -1, 'WITHSCORES')
  return held(tonumber(last[2]) - now)
end
-- free: the first live place in line goes first (lapsed places are dropped as they are met)
for _, lapsed in ipairs(redis.call('zrangebyscore', KEYS[6], '-inf', now, 'LIMIT', 0, 64)) do
  redis.call('zrem', KEYS[5], lapsed)
  redis.call('zrem', KEYS[6], lapsed)
end
for _ = 1, 16 do
  local head = redis.call('zrange', KEYS[5], 0, 0)[1]
  if not head or head == owner then
    break
  end
  if redis.call('zscore', KEYS[6], head) then
    join_line()
    return {0, 0, -1, 0}
  end
  redis.call('zrem', KEYS[5], head) -- in line without a place: lapsed
end
redis.call('zrem', KEYS[5], owner)
redis.call('zrem', KEYS[6], owner)
local token = new_token(0)
redis.call('hset', KEYS[1], 'writer', owner, 'count', 1, 'deadline', now + lease, 'token', token,
  'wait', ARGV[5])
redis.call('pexpire', KEYS[1], lease)
return {1, 1, lease, token}
