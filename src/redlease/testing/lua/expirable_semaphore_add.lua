
redis.call('set', KEYS[1], tonumber(redis.call('get', KEYS[1]) or '0') + tonumber(ARGV[1]))
if tonumber(ARGV[1]) > 0 then redis.call('publish', KEYS[3], ARGV[1]) end
