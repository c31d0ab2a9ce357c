-- Take or re-enter a read hold of a read-write lock (many readers or one writer).
-- KEYS[1]  writer: hash {writer, count, deadline (lease end, ms, server clock), token}
-- KEYS[2]  reader hold counts: hash {owner field -> read hold count}
-- KEYS[3]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[4]  reader tokens: hash {owner field -> fencing token of its read hold,
--          "wait:<owner field>" -> the wait id of the call its first read hold was made for}
-- KEYS[5]  writers' places: zset {owner field -> when its place lapses, ms (server clock)}
-- KEYS[6]  fencing counter: the last token handed out for this lock (never expires)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client-id>:<owner-id>"
-- ARGV[3]  read hold count the caller believes it has (0 on a first acquire)
-- ARGV[4]  wait id: unique per acquire call of the owner (its retries reuse it); a first hold
--          records it, so that a waiter giving up gives back only a hold made for that very
--          call (rw_leave.lua)
-- ARGV[5]  the fencing token of the caller's read hold (a re-entry; ignored on a first
--          acquire): a re-entry joins only the hold with that token, never another hold of the
--          same owner field (a stale copy after a failover to a replica that missed the
--          owner's release and its next acquire)
--          (no caller sends 0; a hold without a stored token matches no token)
-- Reply    {code, hold_count, ms, token}
--   1 GRANTED  hold_count is the new count, ms the caller's read lease left, token its token
--   0 HELD     another owner writes (ms: its lease left), or a writer waits in line (ms: -1)
--  -1 LOST     the caller believed it held a read hold, but it is gone (its lease ran out;
--              hold_count: the owner's count on the server, 0 when the hold there has another
--              token)
-- Each reader has a lease of its own: a reader that is not renewed lapses by itself, and is
-- dropped by the next script that meets it. Writer preference: while a writer has a live
-- place in line, a new reader waits; a re-entry and the writer's own downgrade do not.
-- Retries: a first acquire (ARGV[3] = 0) that finds the owner reading takes that hold as its
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
local after = '(' .. now
local wait_field = 'wait:' .. owner

local function extend(ms) -- the reader keys outlive every reader's lease
  if redis.call('pttl', KEYS[2]) < ms then
    redis.call('pexpire', KEYS[2], ms)
  end
  if redis.call('pttl', KEYS[3]) < ms then
    redis.call('pexpire', KEYS[3], ms)
  end
  if redis.call('pttl', KEYS[4]) < ms then
    redis.call('pexpire', KEYS[4], ms)
  end
end

local function drop(reader)
  redis.call('zrem', KEYS[3], reader)
  redis.call('hdel', KEYS[2], reader)
  local waits = 'wait:' .. reader
  redis.call('hdel', KEYS[4], reader, waits)
end

local function new_token(floor) -- above the counter and floor, not below the clock
  local token = math.max(tonumber(redis.call('get', KEYS[6]) or '0') + 1, floor + 1, now_us)
  redis.call('set', KEYS[6], token)
  return token
end

-- readers whose lease ran out are gone (bounded; liveness is always judged by the lease end)
for _, reader in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now, 'LIMIT', 0, 64)) do
  drop(reader)
end
local count = 0
local mine = tonumber(redis.call('zscore', KEYS[3], owner) or '0')
if mine > now then
  count = tonumber(redis.call('hget', KEYS[2], owner) or '0')
elseif redis.call('hexists', KEYS[2], owner) == 1 then
  drop(owner)
end
if expected == 0 and count > 0 then
  local held = redis.call('hmget', KEYS[4], owner, wait_field)
  if count == 1 and held[2] == ARGV[4] then -- made for this very call: its retry
    return {1, 1, mine - now, tonumber(held[1] or '0')}
  end
  -- a hold of this owner made for another call: re-leased to this one
  local token = new_token(tonumber(held[1] or '0'))
  redis.call('hset', KEYS[2], owner, 1)
  redis.call('hset', KEYS[4], owner, token, wait_field, ARGV[4])
  redis.call('zadd', KEYS[3], now + lease, owner)
  extend(lease)
  return {1, 1, lease, token}
end
if expected > 0 and count > 0
    and tonumber(redis.call('hget', KEYS[4], owner) or '-1') ~= tonumber(ARGV[5]) then
  return {-1, 0, 0, 0} -- another hold of this owner field than the caller's
end
if count == expected + 1 then
  return {1, count, mine - now, tonumber(redis.call('hget', KEYS[4], owner) or '0')}
end
if count ~= expected then
  return {-1, count, 0, 0}
end
if count > 0 then
  local deadline = math.max(mine, now + lease)
  redis.call('hincrby', KEYS[2], owner, 1)
  redis.call('zadd', KEYS[3], deadline, owner)
  extend(deadline - now)
  return {1, count + 1, deadline - now, tonumber(redis.call('hget', KEYS[4], owner) or '0')}
end
local writer = redis.call('hget', KEYS[1], 'writer')
if writer then
  local ends = tonumber(redis.call('hget', KEYS[1], 'deadline') or '0')
  if ends <= now then
    redis.call('del', KEYS[1]) -- the writer's lease ran out
    writer = false
  elseif writer ~= owner then
    return {0, 0, ends - now, 0}
  end
end
if writer ~= owner and redis.call('zcount', KEYS[5], after, '+inf') > 0 then
  return {0, 0, -1, 0} -- a writer waits in line: it goes first
end
local token = new_token(0)
redis.call('hset', KEYS[2], owner, 1)
redis.call('hset', KEYS[4], owner, token, wait_field, ARGV[4])
redis.call('zadd', KEYS[3], now + lease, owner)
extend(lease)
return {1, 1, lease, token}
