
local count = redis.call('get', KEYS[1])
if not count then return 0 end
redis.call('set', KEYS[1], 0)
return tonumber(count)
