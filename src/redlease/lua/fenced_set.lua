-- Write a protected Redis resource only with a fencing token at least as high as any it has seen.
-- KEYS[1]  the resource (a string key)
-- KEYS[2]  the highest token the resource has seen (same hash slot; never expires)
-- ARGV[1]  the writer's fencing token
-- ARGV[2]  the value to set
-- ARGV[3]  expiry of the value in milliseconds (0: none)
-- Reply    {code, seen}
--   1 WRITTEN  the value was set; seen is now the writer's token
--   0 STALE    a newer holder already wrote: nothing changed; seen is the higher token
-- A resource that holds another type than a string is never overwritten: WRONGTYPE error.
local kind = redis.call('type', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE redlease: key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a string')
end
local token = tonumber(ARGV[1])
local seen = tonumber(redis.call('get', KEYS[2]) or '0')
if token < seen then
  return {0, seen}
end
if tonumber(ARGV[3]) > 0 then
  redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[3])
else
  redis.call('set', KEYS[1], ARGV[2])
end
redis.call('set', KEYS[2], ARGV[1])
return {1, token}
