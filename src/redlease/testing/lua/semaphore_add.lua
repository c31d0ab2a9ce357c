
local count = tonumber(redis.call('get', KEYS[1]) or '0') + tonumber(ARGV[1])
redis.call('set', KEYS[1], count)
redis.call('publish', KEYS[2], count)
