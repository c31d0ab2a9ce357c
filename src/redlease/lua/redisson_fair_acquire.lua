-- Acquire or re-enter a fair lock in Redisson's RedissonFairLock layout: the effects of
-- Redisson's tryLock script on its keys, in redlease's reply convention and with its retries.
-- KEYS[1]  lock key: a hash {owner field -> hold count}; the lease is the key's TTL
-- KEYS[2]  Redisson's line "redisson_lock_queue:{<name>}": a list of owner fields, by arrival
-- KEYS[3]  Redisson's places "redisson_lock_timeout:{<name>}": a zset {owner field -> when
--          its place lapses, epoch ms}; lapsed places leave the line from its head
-- KEYS[4]  fencing counter (the plain lock's, redisson_lock_token:{name}: see lock_acquire.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client-id>:<thread-id>"
-- ARGV[3]  hold count the caller believes it has (0 on a first acquire)
-- ARGV[4]  the caller's wait, ms (Redisson's threadWaitTime, 5 min, or the acquire's own
--          timeout): a new place lapses this long after the one before it (or after the
--          holder's lease), and a grant moves every place behind up by it (Redisson's rule)
-- ARGV[5]  1: take a place at the end of the line when the lock cannot be had; 0: one try
-- ARGV[6]  wait id: unique per acquire call of the owner (its retries reuse it). A new hold
--          records it (field "redlease:wait", which Redisson's scripts ignore), so that a
--          first acquire takes only a hold made for this very call as its retry, and a waiter
--          giving up gives back only such a hold (redisson_fair_leave.lua).
-- ARGV[7]  the fencing token of the caller's hold (a re-entry; ignored on a first acquire):
--          a re-entry joins only the hold with that token (field "redlease:fence"), never
--          another hold of the same owner field (a stale copy after a failover to a replica
--          that missed the owner's release and its next acquire)
--          (no caller sends 0; a hold without a stored token matches no token)
-- Reply    {code, hold_count, ttl_ms, token}
--   1 GRANTED  hold_count is the new count, ttl_ms the lease now on the key, token the hold's
--              fencing token (a re-entry keeps the token of the hold it joins)
--   0 HELD     ttl_ms: the holder's remaining lease (-1: no expiry) for the first waiter in
--              line (it re-checks the moment a dead holder's lease ends) and a caller not in
--              line, the caller's own lease for a waiter behind the first (so the line does
--              not re-check all at once), or -2 when the lock is
--              free but it is the turn of the first waiter in line; token: the last fencing
--              token handed out. A caller that joins the line now has a place in it (a caller that
--              has one keeps it as it is, as in Redisson).
--  -1 LOST     the caller believed it held the lock, but its hold is gone (hold_count: the
--              owner's count on the server, 0 when the hold there has another token)
-- Retries: a first acquire (ARGV[3] = 0) that finds its owner's field takes that hold as its
-- own retry (the reply was lost: GRANTED with the TTL on the key, no second hold counted) only
-- if the hold records this very call's wait id. A hold of the owner made for another call (a
-- wait that gave up and could not give it back, a stale copy after a failover) is re-leased
-- to this call: count 1, a fresh token, this call's wait id and lease. A re-entry's retry
-- finds the count one above what the caller believes (same token); a re-entry that finds a
-- hold of its owner with another token is answered LOST with count 0 (its caller then
-- acquires afresh). A free lock goes to the caller when the line is empty or the caller is
-- first in it: it then leaves the line. Time is the server's clock (Redisson's clients write
-- their own in these places).
-- Fencing: the hold's token is in field "redlease:fence" of the lock hash (Redisson's scripts
-- ignore it); every token handed out is max(last token + 1, the hold's token + 1, server time
-- in microseconds), and the counter is set to it: tokens keep increasing after a data loss.
local expected = tonumber(ARGV[3])
local lease = tonumber(ARGV[1])
local fields = redis.call('hmget', KEYS[1], ARGV[2], 'redlease:fence', 'redlease:wait')
local count = tonumber(fields[1] or '0')
local function new_token(now) -- above the counter and the hold's, not below the clock
  local token = math.max(tonumber(redis.call('get', KEYS[4]) or '0') + 1,
    tonumber(fields[2] or '0') + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('set', KEYS[4], token)
  return token
end
if expected == 0 and count > 0 then
  if count == 1 and fields[3] == ARGV[6] then -- made for this very call: its retry
    return {1, 1, redis.call('pttl', KEYS[1]), tonumber(fields[2] or '0')}
  end
  -- a hold of this owner made for another call: re-leased to this one
  local token = new_token(redis.call('time'))
  redis.call('hset', KEYS[1], ARGV[2], 1, 'redlease:fence', token, 'redlease:wait', ARGV[6])
  redis.call('pexpire', KEYS[1], lease)
  return {1, 1, lease, token}
end
if expected > 0 and count > 0 and tonumber(fields[2] or '-1') ~= tonumber(ARGV[7]) then
  return {-1, 0, redis.call('pttl', KEYS[1]), 0} -- another hold of this owner field
end
if count == expected + 1 then
  return {1, count, redis.call('pttl', KEYS[1]), tonumber(fields[2] or '0')}
end
if count ~= expected then
  return {-1, count, redis.call('pttl', KEYS[1]), 0}
end
if count > 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local ttl = redis.call('pttl', KEYS[1])
  if ttl < lease then
    -- a re-entry never shortens the lease that the outer hold has
    redis.call('pexpire', KEYS[1], lease)
    ttl = lease
  end
  return {1, count + 1, ttl, tonumber(redis.call('hget', KEYS[1], 'redlease:fence') or '0')}
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
for _ = 1, 100 do -- lapsed places leave from the head (a head without a place too)
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then
    break
  end
  local lapses = redis.call('zscore', KEYS[3], head)
  if lapses and tonumber(lapses) > now_ms then
    break
  end
  redis.call('zrem', KEYS[3], head)
  redis.call('lpop', KEYS[2])
end
local wait = tonumber(ARGV[4])
local head = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (not head or head == ARGV[2]) then
  if head then
    redis.call('lpop', KEYS[2])
  end
  redis.call('zrem', KEYS[3], ARGV[2])
  local behind = redis.call('zrange', KEYS[3], 0, -1)
  for i = 1, #behind do
    redis.call('zincrby', KEYS[3], -wait, behind[i])
  end
  local token = new_token(now)
  redis.call('hset', KEYS[1], ARGV[2], 1, 'redlease:fence', token, 'redlease:wait', ARGV[6])
  redis.call('pexpire', KEYS[1], lease)
  return {1, 1, lease, token}
end
local ttl = redis.call('pttl', KEYS[1]) -- -2: free, and another waiter's turn
local fence = tonumber(redis.call('get', KEYS[4]) or '0')
local function held(behind) -- the reply; behind: the caller is in line behind another
  if ttl >= 0 and behind then
    return {0, 0, lease, fence}
  end
  return {0, 0, ttl, fence}
end
if ARGV[5] ~= '1' then
  return held(false)
end
if redis.call('zscore', KEYS[3], ARGV[2]) then
  return held(head ~= ARGV[2])
end
-- a new place at the end: it lapses one wait after the place before it (or the lease) does
local from = ttl
local last = redis.call('lindex', KEYS[2], -1)
if last and last ~= ARGV[2] then
  local before = redis.call('zscore', KEYS[3], last)
  if before then
    from = tonumber(before) - now_ms
  end
end
if redis.call('zadd', KEYS[3], from + wait + now_ms, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
return held(redis.call('lindex', KEYS[2], 0) ~= ARGV[2])
