-- Acquire or re-enter a reentrant lock, in Redisson's RLock layout.
-- KEYS[1]  lock key: a hash {owner field -> hold count}; the lease is the key's TTL
-- KEYS[2]  wait queue: zset {owner field -> arrival time in microseconds (server clock)}
-- KEYS[3]  queue deadlines: hash {owner field -> when its place lapses, ms (server clock)}
-- KEYS[4]  fencing counter: the last token handed out for this name (never expires)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client-id>:<thread-id>"
-- ARGV[3]  hold count the caller believes it has (0 on a first acquire)
-- ARGV[4]  how long a place in the queue lasts unless the caller retries, ms (0: do not queue)
-- ARGV[5]  1 for a fair lock: a free lock goes to the first live waiter in line, never to a
--          newcomer that would pass it (0: a free lock is anyone's)
-- ARGV[6]  1 when a release may hand the lock to this waiter outright (its lease is renewed
--          by a watchdog, which lengthens the short first lease of such a hand-over); 0: a
--          release only reserves the lock for it
-- ARGV[7]  wait id: unique per acquire call of the owner (its retries reuse it). A new hold
--          records it (field "redlease:wait"), so that a waiter giving up gives back only a
--          hold made for that very call, and a hand-over message names the call it is for.
-- A place in line (KEYS[3]) is "<lapses at ms>" or, for a waiter that may be handed the
-- lock, "<lapses at ms>:<last seen ms>:<wait id>" (server clock).
-- Reply    {code, hold_count, ttl_ms, token}
--   1 GRANTED  hold_count is the new count, ttl_ms the lease now on the key, token the hold's
--              fencing token (a re-entry keeps the token of the hold it joins)
--   0 HELD     someone holds it, or it is reserved for the waiter whose turn it is; ttl_ms is
--              its remaining lease (-1: no expiry), token the last fencing token handed out
--              (a hand-over with a token no higher was made before this reply: not for the
--              caller's wait from now on). A queueing caller now has a place in line.
--  -1 LOST     the caller believed it held the lock, but its hold is gone
-- A retried request (the reply was lost, the same request arrives again) finds the count one
-- above what the caller believes and answers GRANTED without counting a second hold; the
-- caller's place in line, if any, goes (every way out of a wait leaves the line).
-- Fencing: a new hold's token is max(last token + 1, server time in microseconds), so tokens
-- keep increasing even after the server lost its data (a restart without persistence), as long
-- as the server's clock does not step back past tokens already handed out. The hold's token is
-- kept in the lock hash (field "redlease:fence"), which Redisson ignores.
local expected = tonumber(ARGV[3])
local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0')
if count == expected + 1 then
  if redis.call('zrem', KEYS[2], ARGV[2]) == 1 then
    redis.call('hdel', KEYS[3], ARGV[2])
  end
  local token = tonumber(redis.call('hget', KEYS[1], 'redlease:fence') or '0')
  return {1, count, redis.call('pttl', KEYS[1]), token}
end
if count ~= expected then
  return {-1, count, redis.call('pttl', KEYS[1]), 0}
end
local lease = tonumber(ARGV[1])
local function now_ms()
  local now = redis.call('time')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
local function outsiders_turn() -- an outsiders' turn is on: only its marker costs a TIME
  local until_ms = redis.call('hget', KEYS[3], 'redlease:outsiders')
  return until_ms ~= false and tonumber(until_ms) > now_ms()
end
local function queue_and_wait(ttl)
  local place_ms = tonumber(ARGV[4])
  if place_ms > 0 then
    local now = redis.call('time')
    local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
    redis.call('zadd', KEYS[2], 'NX', now_us, ARGV[2])
    local now_ms = math.floor(now_us / 1000)
    local place = string.format('%d', now_ms + place_ms)
    if ARGV[6] == '1' then
      place = place .. string.format(':%d:', now_ms) .. ARGV[7]
    end
    redis.call('hset', KEYS[3], ARGV[2], place)
    redis.call('pexpire', KEYS[2], place_ms)
    redis.call('pexpire', KEYS[3], place_ms)
  end
  return {0, 0, ttl, tonumber(redis.call('get', KEYS[4]) or '0')}
end
local handed = false -- the hold comes by a hand-over (a reservation taken up)
if count == 0 then
  if redis.call('exists', KEYS[1]) == 1 then
    -- a released lock may be reserved (field "redlease:handoff") for the first waiter in line
    if redis.call('hget', KEYS[1], 'redlease:handoff') ~= ARGV[2]
        or redis.call('hlen', KEYS[1]) ~= 1 then
      local ttl = redis.call('pttl', KEYS[1])
      if ttl == -1 then -- a lock always has a lease: a hash without one may be a user's
        local fields = redis.call('hscan', KEYS[1], 0, 'COUNT', 64)
        for i = 1, #fields[2], 2 do
          local f = fields[2][i]
          if fields[1] ~= '0' or (string.sub(f, 1, 9) ~= 'redlease:'
              and not string.match(f, '^%x+%-%x+%-%x+%-%x+%-%x+:%d+$')) then
            return redis.error_reply('WRONGTYPE redlease: key ' .. KEYS[1]
              .. ' holds a hash, not a lock')
          end
        end
      end
      return queue_and_wait(ttl)
    end
    redis.call('del', KEYS[1])
    handed = true
  elseif outsiders_turn() then
    -- (see lock_release.lua) a free lock is left to a Redisson waiter
    return queue_and_wait(-2)
  elseif ARGV[5] == '1' and redis.call('exists', KEYS[2]) == 1 then
    -- fair: the first live waiter in line goes first (lapsed places are dropped on the way)
    local now = now_ms()
    for _ = 1, 16 do
      local head = redis.call('zrange', KEYS[2], 0, 0)[1]
      if not head or head == ARGV[2] then
        break
      end
      local place = redis.call('hget', KEYS[3], head) or '0'
      if tonumber(string.match(place, '^%d+')) > now then
        return queue_and_wait(-2)
      end
      redis.call('zrem', KEYS[2], head)
      redis.call('hdel', KEYS[3], head)
    end
  end
  local now = redis.call('time')
  local token = math.max(tonumber(redis.call('get', KEYS[4]) or '0') + 1,
    tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('set', KEYS[4], token)
  redis.call('hset', KEYS[1], ARGV[2], 1, 'redlease:fence', token, 'redlease:wait', ARGV[7])
  if handed then
    redis.call('hset', KEYS[1], 'redlease:handed', 1)
  end
  redis.call('pexpire', KEYS[1], lease)
  if redis.call('zrem', KEYS[2], ARGV[2]) == 1 then
    redis.call('hdel', KEYS[3], ARGV[2])
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
return {1, count + 1, ttl, tonumber(redis.call('hget', KEYS[1], 'redlease:fence') or '0')}
