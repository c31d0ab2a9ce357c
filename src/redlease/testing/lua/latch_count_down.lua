
local left = redis.call('decr', KEYS[1])
if left <= 0 then redis.call('del', KEYS[1]) end
if left == 0 then redis.call('publish', KEYS[2], '0') end
