
if redis.call('del', KEYS[1]) == 0 then return 0 end
redis.call('publish', KEYS[2], '1')
return 1
