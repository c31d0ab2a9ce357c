-- Take one permit under a lease, or several at once under one lease, after giving back
-- permits whose lease ran out.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  leases: zset {permit id -> when its lease ends, ms (server clock)}
-- KEYS[3]  semaphore channel; a count raised by expired leases is published
-- KEYS[4]  waiters: zset {owner field -> when its registration lapses, ms (server clock)}
-- ARGV[1]  permit id chosen by the caller (16 random bytes), the same for a retry
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  owner field of the caller
-- ARGV[4]  how long the caller's registration as a waiter lasts, ms (0: do not register)
-- ARGV[5]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[6..n+4] when n permits are taken at once (all or none): the other n - 1 permit ids,
--          chosen by the caller as ARGV[1] is (none for one permit)
-- Reply    {code, ms, available}
--   1 GRANTED  ms is the lease left on the permits; a retried request finds its own first id
--              still leased and answers GRANTED without taking more permits; one whose lease
--              ran out gives its own permits back first and is then a fresh acquire
--   0 SHORT    not enough permits are free; ms is the time until the soonest lease ends
--              (-1: none held). A registering caller now counts as a waiter.
-- At most 100 expired leases of others are given back per call (bounded work; the rest on the
-- next one); the request's own expired ones are always given back.
-- The wake-up it publishes is a hint, sent by pcall: a user the server does not let publish
-- still gets this done (waiters re-check on their own within 5 s).
if ARGV[5] ~= 'publish' and ARGV[5] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[5] must be publish or spublish')
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local mine = redis.call('zscore', KEYS[2], ARGV[1])
if mine and tonumber(mine) > now_ms then
  return {1, tonumber(mine) - now_ms, tonumber(redis.call('get', KEYS[1]) or '0')}
end
local ids = {ARGV[1]}
for i = 6, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
-- A copy of this request that comes after its lease ran out (a retry, a late copy) is a fresh
-- acquire: its own permits still in the leases are given back first, every one of them,
-- whatever else has expired (the bounded clean-up below may not reach them, and a permit
-- taken again under an id still in the leases would be counted twice). One of its ids still
-- leased (only a late copy can find that: ARGV[1] released, another kept) stays as it is and
-- is not taken again.
local gone = 0
local leased = 0
for first = 1, #ids, 1000 do -- (in chunks: unpack has a bound)
  local last = math.min(first + 999, #ids)
  local scores = redis.call('zmscore', KEYS[2], unpack(ids, first, last))
  local back = {}
  for i = 1, last - first + 1 do
    if scores[i] and tonumber(scores[i]) <= now_ms then
      back[#back + 1] = ids[first + i - 1]
    elseif scores[i] then
      leased = leased + 1
    end
  end
  if #back > 0 then
    gone = gone + redis.call('zrem', KEYS[2], unpack(back))
  end
end
local expired = redis.call('zrangebyscore', KEYS[2], '-inf', now_ms, 'limit', 0, 100)
if #expired > 0 then
  gone = gone + redis.call('zrem', KEYS[2], unpack(expired))
end
if gone > 0 then
  local value = redis.call('incrby', KEYS[1], gone)
  if value > 0 then
    redis.pcall(ARGV[5], KEYS[3], value)
  end
end
local available = tonumber(redis.call('get', KEYS[1]) or '0')
local lease = tonumber(ARGV[2])
local permits = #ids - leased
if available >= permits then
  available = redis.call('decrby', KEYS[1], permits)
  for _, id in ipairs(ids) do
    redis.call('zadd', KEYS[2], 'NX', now_ms + lease, id)
  end
  -- a semaphore given an expiry (lease_semaphore_expire.lua) takes its leases along
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  redis.call('zrem', KEYS[4], ARGV[3])
  return {1, lease, available}
end
local registration_ms = tonumber(ARGV[4])
if registration_ms > 0 then
  redis.call('zremrangebyscore', KEYS[4], '-inf', now_ms)
  redis.call('zadd', KEYS[4], now_ms + registration_ms, ARGV[3])
  redis.call('pexpire', KEYS[4], registration_ms)
end
local soonest = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
local wait_ms = -1
if soonest[2] then
  wait_ms = math.max(0, tonumber(soonest[2]) - now_ms)
end
return {0, wait_ms, available}
