-- Acquire or re-enter a reentrant lock, in Redisson's RLock layout.
-- KEYS[1]  lock key: a hash {owner field -> hold count}; the lease is the key's TTL
-- KEYS[2]  the line: zset {"<owner field> <wait id> <hand-over lease>" -> arrival time in
--          microseconds (server clock)}; no TTL: a place goes when its waiter takes the lock,
--          leaves, or is found dead (see below); the key goes with its last place
-- KEYS[3]  outsiders' turn: hash, field "redlease:outsiders" (see lock_release.lua)
-- KEYS[4]  fencing counter: the last token handed out for this name (never expires); it is
--          Redisson's RFencedLock token key, redisson_lock_token:{name}, which a Java thread
--          INCRs at each of its acquisitions (and re-entries) of the same lock: one sequence
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client-id>:<thread-id>"
-- ARGV[3]  hold count the caller believes it has (0 on a first acquire)
-- ARGV[4]  1: take a place in line if the lock cannot be had; 0: do not
-- ARGV[5]  1 for a fair lock: a free lock goes to the first live waiter in line, never to a
--          newcomer that would pass it (0: a free lock is anyone's)
-- ARGV[6]  the hand-over lease of the caller's place: "w<ms>" when a release hands it the lock
--          with the releaser's hand-over window as first lease, which its watchdog lengthens
--          to <ms>, or "<ms>": the lease a release hands it the lock with (its own)
-- ARGV[7]  wait id: unique per acquire call of the owner (its retries reuse it). A new hold
--          records it (field "redlease:wait"), so that a waiter giving up gives back only a
--          hold made for that very call, and a hand-over message names the call it is for.
-- ARGV[8]  prefix of the waiters' own channels (see lock_release.lua): a waiter is live while
--          its client listens on the prefix followed by its client id
-- ARGV[9]  'spublish' for a client on sharded pub/sub (SHARDNUMSUB counts its listeners),
--          else 'publish'
-- ARGV[10] the fencing token of the caller's hold (0 on a first acquire; 0 on a re-entry:
--          the caller does not know it, as a Redlock owner on each master): a re-entry joins
--          only the hold with that token, never another hold of the same owner field (a stale
--          copy after a failover to a replica that missed the owner's release and new acquire)
-- Reply    {code, hold_count, ttl_ms, token}
--   1 GRANTED  hold_count is the new count, ttl_ms the lease now on the key, token the hold's
--              fencing token (a re-entry keeps the token of the hold it joins)
--   0 HELD     someone holds it (or a free lock is another's turn: ttl_ms -2); ttl_ms bounds
--              the wait (-1: no expiry): the holder's remaining lease (PTTL) for the first
--              live waiter in line, which so re-checks the moment a dead holder's lease ends
--              (a dead holder's successor); for a waiter behind it, and for a redlease hold
--              only, the hold's whole lease or the caller's own, whichever is shorter (so the
--              line does not re-check all at once, and a waiter that becomes first learns it
--              before a holder with the caller's lease could run out), token the last fencing
--              token handed out
--              (a hand-over with a token no higher was made before this reply: not for the
--              caller's wait from now on). A caller that joins the line now has a place in it.
--  -1 LOST     the caller believed it held the lock, but its hold is gone (hold_count is
--              the owner's count on the server, 0 when the hold there is another one: its
--              token is not the caller's)
-- Retries: a first acquire (ARGV[3] = 0) that finds its owner's field takes that hold as its
-- own retry (the reply was lost, the same request arrives again: GRANTED with the TTL on the
-- key, no second hold counted) only if the hold records this very call's wait id. A hold of
-- the owner made for another call (a wait that gave up and could not give it back, a stale
-- copy after a failover) is re-leased to this call: count 1, a fresh token, this call's wait
-- id and lease. A re-entry's retry finds the count one above what the caller believes (same
-- token). Either way the caller's place in line, if any, goes (every way out of a wait leaves
-- the line).
-- Fencing: every token any path hands out is max(last token + 1, hold's token + 1, server
-- time in microseconds) and the counter is set to it, so tokens keep increasing even after the
-- server lost its data (a restart without persistence, a failover to a replica that missed the
-- last grants), as long as the server's clock does not step back past tokens already handed
-- out. The hold's token is kept in the lock hash (field "redlease:fence"), which Redisson
-- ignores. Shared with Java's RFencedLock: a token here is above every INCR Java made (the
-- counter), and the counter is left at the token, so Java's next INCR lands above it. Java's
-- INCR has no time floor: after a failover to a replica that missed some of its INCRs (or
-- redlease's tokens), Java's next tokens may repeat until a redlease acquisition of the name
-- lifts the counter to the clock; redlease's own tokens never repeat (the floor).
-- Hot path: a caller that finds the lock held runs hmget, time, zadd and zrange, then pttl
-- (first in line) or pubsub numsub (behind a live waiter); one that finds it free and nobody
-- in line runs hmget, exists (of the lock and its line at once), time, set (the counter), hset
-- and pexpire.
-- A line has no TTL: a dead waiter's place goes when its turn comes or a free lock meets it.
local place = ARGV[2] .. ' ' .. ARGV[7] .. ' ' .. ARGV[6]
local expected = tonumber(ARGV[3])
local mine = tonumber(ARGV[10] or '0')
local fields = redis.call('hmget', KEYS[1], ARGV[2], 'redlease:fence', 'redlease:lease',
  'redlease:wait')
local count = tonumber(fields[1] or '0')
local fence = tonumber(fields[2] or '0')
local lease = tonumber(ARGV[1])
local function last_token()
  return tonumber(fields[2] or redis.call('get', KEYS[4]) or '0')
end
local function new_token() -- above the counter and the hold's token, not below the clock
  local now = redis.call('time')
  local token = math.max(fence + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
  local last = tonumber(redis.call('set', KEYS[4], token, 'get') or '0')
  if last >= token then -- the counter ran ahead of the clock: go on from it
    token = last + 1
    redis.call('set', KEYS[4], token)
  end
  return token
end
if expected == 0 and count > 0 then
  redis.call('zrem', KEYS[2], place)
  if count == 1 and fields[4] == ARGV[7] then -- made for this very call: its retry
    return {1, 1, redis.call('pttl', KEYS[1]), fence}
  end
  -- a hold of this owner made for another call: re-leased to this one
  local token = new_token()
  redis.call('hset', KEYS[1], ARGV[2], 1, 'redlease:fence', token, 'redlease:wait', ARGV[7],
    'redlease:lease', lease)
  redis.call('pexpire', KEYS[1], lease)
  return {1, 1, lease, token}
end
if expected > 0 and count > 0 and mine ~= 0 and fence ~= mine then
  return {-1, 0, redis.call('pttl', KEYS[1]), 0} -- another hold than the caller's
end
if expected > 0 and count == expected + 1 then
  redis.call('zrem', KEYS[2], place)
  return {1, count, redis.call('pttl', KEYS[1]), fence}
end
if count ~= expected then
  return {-1, count, redis.call('pttl', KEYS[1]), 0}
end
local function now_ms()
  local now = redis.call('time')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
local function outsiders_turn() -- an outsiders' turn is on: only its marker costs a TIME
  local until_ms = redis.call('hget', KEYS[3], 'redlease:outsiders')
  return until_ms ~= false and tonumber(until_ms) > now_ms()
end
local function join_line_and_wait(ttl)
  if ARGV[4] == '1' then
    local now = redis.call('time')
    redis.call('zadd', KEYS[2], 'NX', tonumber(now[1]) * 1000000 + tonumber(now[2]), place)
  end
  return {0, 0, ttl, last_token()}
end
local function live(head) -- its client still listens on its own channel for this lock
  local channel = ARGV[8] .. (string.match(head, '^(%S*):%d+ ') or '')
  local reply
  if ARGV[9] == 'spublish' then
    reply = redis.call('pubsub', 'shardnumsub', channel)
  else
    reply = redis.call('pubsub', 'numsub', channel)
  end
  return tonumber(reply[2]) > 0
end
local function first_live() -- the caller's place is the first in line of a live waiter
  for _, ahead in ipairs(redis.call('zrange', KEYS[2], 0, 3)) do
    if ahead == place then
      return true
    end
    if live(ahead) then
      return false
    end
  end
  return false -- (behind more than 3 dead places: the next free lock drops them)
end
if count == 0 then
  -- a redlease hold records its lease (field "redlease:lease"), never shorter than what is
  -- left of it: the bound of a waiter behind the first (see the reply above)
  local ttl, line = fields[3], nil
  if not ttl then
    -- no redlease hold here: the lock is free, or held by another (a Redisson thread); one
    -- EXISTS of the lock and its line tells a free lock with nobody in line, the common case
    local found = redis.call('exists', KEYS[1], KEYS[2])
    if found == 0 then
      ttl, line = -2, false
    else
      ttl = redis.call('pttl', KEYS[1])
      line = ttl == -2 or found == 2 -- (a missing lock: the one key found is the line)
    end
  end
  ttl = tonumber(ttl)
  if ttl ~= -2 then
    if ttl == -1 then -- a lock always has a lease: a hash without one may be a user's
      local scan = redis.call('hscan', KEYS[1], 0, 'COUNT', 64)
      for i = 1, #scan[2], 2 do
        local f = scan[2][i]
        if scan[1] ~= '0' or (string.sub(f, 1, 9) ~= 'redlease:'
            and not string.match(f, '^%x+%-%x+%-%x+%-%x+%-%x+:%d+$')) then
          return redis.error_reply('WRONGTYPE redlease: key ' .. KEYS[1]
            .. ' holds a hash, not a lock')
        end
      end
    end
    local reply = join_line_and_wait(math.min(ttl, lease))
    if fields[3] and (ARGV[4] ~= '1' or first_live()) then
      reply[3] = redis.call('pttl', KEYS[1])
    end
    return reply
  end
  if line == nil then
    line = redis.call('exists', KEYS[2]) == 1
  end
  if line and outsiders_turn() then
    -- (see lock_release.lua) a free lock is left to a Redisson waiter
    return join_line_and_wait(-2)
  elseif line then
    -- a free lock with a line (a hand-over that came to nothing, an outsiders' turn): places
    -- of waiters whose client is gone are dropped; a fair lock goes to the first live one
    for _ = 1, 16 do
      local head = redis.call('zrange', KEYS[2], 0, 0)[1]
      if not head or string.sub(head, 1, #ARGV[2] + 1) == ARGV[2] .. ' ' then
        break
      end
      if live(head) then
        if ARGV[5] == '1' then
          return join_line_and_wait(-2)
        end
        break
      end
      redis.call('zrem', KEYS[2], head)
    end
  end
  local token = new_token()
  redis.call('hset', KEYS[1], ARGV[2], 1, 'redlease:fence', token, 'redlease:wait', ARGV[7],
    'redlease:lease', lease)
  redis.call('pexpire', KEYS[1], lease)
  if line then
    redis.call('zrem', KEYS[2], place)
  end
  return {1, 1, lease, token}
end
redis.call('hincrby', KEYS[1], ARGV[2], 1)
local ttl = redis.call('pttl', KEYS[1])
if ttl < lease then
  -- a re-entry never shortens the lease that the outer hold has
  redis.call('pexpire', KEYS[1], lease)
  ttl = lease
end
return {1, count + 1, ttl, fence}
