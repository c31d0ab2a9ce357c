-- Read a protected Redis resource as a holder with a fencing token, and make the resource
-- refuse every older token from now on, so a stale holder cannot write between this read and
-- the holder's own write.
-- KEYS[1]  the resource (a string key)
-- KEYS[2]  the highest token the resource has seen (same hash slot; never expires)
-- ARGV[1]  the reader's fencing token
-- Reply    {code, seen, value}
--   1 READ   value is the resource's value (nil when it has none); seen is now the token
--   0 STALE  a newer holder already read or wrote it: nothing changed; seen is the higher token
-- A resource that holds another type than a string: WRONGTYPE error, the token is not recorded.
local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE redlease: key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a string')
end
local token = tonumber(ARGV[1])
local seen = tonumber(redis.call('get', KEYS[2]) or '0')
if token < seen then
  return {0, seen, false}
end
redis.call('set', KEYS[2], ARGV[1])
return {1, token, redis.call('get', KEYS[1])}
