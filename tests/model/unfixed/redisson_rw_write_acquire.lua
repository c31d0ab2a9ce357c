-- Take or re-enter the write side of a read-write lock kept in Redisson's RReadWriteLock layout.
-- KEYS[1]  the lock: a hash {"mode" -> "read" or "write", reader field -> read hold count,
--          "<field>:write" -> write hold count}; its TTL is the longest lease of any hold
-- KEYS[2]  fencing counter: the last token handed out for this name (never expires)
-- KEYS[3]  tokens: hash {field -> fencing token of its first hold} (redlease's own key)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the owner's write field "<client-id>:<thread-id>:write"
-- ARGV[3]  write hold count the caller believes it has (0 on a first acquire)
-- ARGV[4]  the owner's read field "<client-id>:<thread-id>"
-- Reply    {code, hold_count, ttl_ms, token}
--   1 GRANTED  hold_count is the new write count, ttl_ms the lock's TTL, token the fencing
--              token of the owner's write holds
--   0 HELD     another owner writes, or someone reads; ttl_ms is the lock's TTL
--  -1 LOST     the caller's write count is not what it believes (hold_count: the server's)
--  -2 UPGRADE  the caller reads and asks to write: it would wait for its own read hold
-- A retried request (its reply was lost) finds the count one above what the caller believes
-- and answers GRANTED without counting a second hold.
local field = ARGV[2]
local expected = tonumber(ARGV[3])
local lease = tonumber(ARGV[1])
local count = tonumber(redis.call('hget', KEYS[1], field) or '0')
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
  local now = redis.call('time')
  token = math.max(tonumber(redis.call('get', KEYS[2]) or '0') + 1,
    tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('set', KEYS[2], token)
  redis.call('hset', KEYS[3], field, token)
else
  token = tonumber(redis.call('hget', KEYS[3], field) or '0')
end
if redis.call('pttl', KEYS[3]) < lease then
  redis.call('pexpire', KEYS[3], lease)
end
return {1, count + 1, redis.call('pttl', KEYS[1]), token}
