
redis.call('publish', KEYS[2], redis.call('incrby', KEYS[1], ARGV[1]))
