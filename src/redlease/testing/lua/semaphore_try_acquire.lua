
local count = redis.call('get', KEYS[1])
if count and tonumber(count) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0
