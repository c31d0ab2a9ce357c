
-- ARGV: permits in all, leased ones (run out or not) included
local count = redis.call('get', KEYS[1])
if not count then
  redis.call('set', KEYS[1], ARGV[1])
  redis.call('publish', KEYS[3], ARGV[1])
  return
end
local total = tonumber(count) + redis.call('zcard', KEYS[2])
if total == tonumber(ARGV[1]) then return end
redis.call('incrby', KEYS[1], tonumber(ARGV[1]) - total)
redis.call('publish', KEYS[3], ARGV[1])
