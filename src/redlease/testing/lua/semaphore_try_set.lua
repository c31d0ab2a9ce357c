
if redis.call('exists', KEYS[1]) == 1 then return 0 end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
