-- Take or re-enter the write side of a read-write lock kept in Redisson's RReadWriteLock layout.
-- KEYS[1]  the lock: a hash {"mode" -> "read" or "write", reader field -> read hold count,
--          "<field>:write" -> write hold count}; its TTL is the longest lease of any hold
-- KEYS[2]  fencing counter: the last token handed out for this name (never expires)
-- KEYS[3]  tokens: hash {field -> fencing token of its first hold, "wait:<field>" -> the wait
--          id of the call its first hold was made for} (redlease's own key: Redisson's lock
--          hash keeps only Redisson's fields)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the owner's write field "<client-id>:<thread-id>:write"
-- ARGV[3]  write hold count the caller believes it has (0 on a first acquire)
-- ARGV[4]  the owner's read field "<client-id>:<thread-id>"
-- ARGV[5]  wait id: unique per acquire call of the owner (its retries reuse it); a first hold
--          records it, so that a waiter giving up gives back only a hold made for that very
--          call (redisson_rw_leave.lua)
-- ARGV[6]  the fencing token of the caller's write hold (a re-entry; ignored on a first
--          acquire): a re-entry joins only the hold with that token (in the tokens hash), never
--          another hold of the same field (a stale copy after a failover to a replica that
--          missed the owner's release and its next acquire)
--          (no caller sends 0; a hold without a stored token matches no token)
-- Reply    {code, hold_count, ttl_ms, token}
--   1 GRANTED  hold_count is the new write count, ttl_ms the lock's TTL, token the fencing
--              token of the owner's write holds
--   0 HELD     another owner writes, or someone reads; ttl_ms is the lock's TTL
--  -1 LOST     the caller's write count is not what it believes (hold_count: the server's;
--              0 when the hold there has another token)
--  -2 UPGRADE  the caller reads and asks to write: it would wait for its own read hold
-- Retries: a first acquire (ARGV[3] = 0) that finds the owner writing takes that hold as its
-- own retry (the reply was lost: GRANTED, no second hold counted) only if the hold records
-- this very call's wait id. A hold of the owner made for another call (a wait that gave up
-- and could not give it back, a stale copy after a failover) is re-leased to this call:
-- count 1, a fresh token, this call's wait id and lease (the lock's TTL is set to the lease
-- when the hold is the lock's only one, else only lengthened to it: the owner's own read
-- holds keep theirs). A re-entry's retry finds the count one above what the caller believes
-- (same token); a re-entry that finds a hold of its owner's field with another token is
-- answered LOST with count 0 (its caller then acquires afresh).
-- Fencing: every token handed out is max(last token + 1, the hold's token + 1, server time in
-- microseconds), and the counter is set to it: tokens keep increasing after a data loss.
local field = ARGV[2]
local expected = tonumber(ARGV[3])
local lease = tonumber(ARGV[1])
local wait_field = 'wait:' .. field
local count = tonumber(redis.call('hget', KEYS[1], field) or '0')
local function new_token(floor) -- above the counter and floor, not below the clock
  local now = redis.call('time')
  local token = math.max(tonumber(redis.call('get', KEYS[2]) or '0') + 1, floor + 1,
    tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('set', KEYS[2], token)
  redis.call('hset', KEYS[3], field, token, wait_field, ARGV[5])
  if redis.call('pttl', KEYS[3]) < lease then
    redis.call('pexpire', KEYS[3], lease)
  end
  return token
end
if expected == 0 and count > 0 then
  local held = redis.call('hmget', KEYS[3], field, wait_field)
  if count == 1 and held[2] == ARGV[5] then -- made for this very call: its retry
    return {1, 1, redis.call('pttl', KEYS[1]), tonumber(held[1] or '0')}
  end
  -- a hold of this owner made for another call: re-leased to this one
  redis.call('hset', KEYS[1], field, 1)
  if redis.call('hlen', KEYS[1]) == 2 or redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
  local token = new_token(tonumber(held[1] or '0'))
  return {1, 1, redis.call('pttl', KEYS[1]), token}
end
if expected > 0 and count > 0
    and tonumber(redis.call('hget', KEYS[3], field) or '-1') ~= tonumber(ARGV[6]) then
  return {-1, 0, redis.call('pttl', KEYS[1]), 0} -- another hold of this field than the caller's
end
if count == expected + 1 then
  local token = tonumber(redis.call('hget', KEYS[3], field) or '0')
  return {1, count, redis.call('pttl', KEYS[1]), token}
end
if count ~= expected then
  return {-1, count, redis.call('pttl', KEYS[1]), 0}
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  if redis.call('exists', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE redlease: key ' .. KEYS[1]
      .. ' holds a hash, not a read-write lock')
  end
  redis.call('hset', KEYS[1], 'mode', 'write')
elseif mode == 'read' then
  if redis.call('hexists', KEYS[1], ARGV[4]) == 1 then
    return {-2, 0, redis.call('pttl', KEYS[1]), 0}
  end
  return {0, 0, redis.call('pttl', KEYS[1]), 0}
elseif count == 0 then
  return {0, 0, redis.call('pttl', KEYS[1]), 0}
end
redis.call('hincrby', KEYS[1], field, 1)
if redis.call('pttl', KEYS[1]) < lease then
  redis.call('pexpire', KEYS[1], lease)
end
local token
if count == 0 then
  token = new_token(0)
else
  token = tonumber(redis.call('hget', KEYS[3], field) or '0')
  if redis.call('pttl', KEYS[3]) < lease then
    redis.call('pexpire', KEYS[3], lease)
  end
end
return {1, count + 1, redis.call('pttl', KEYS[1]), token}
