
give_back_expired(tonumber(ARGV[1]), -1)
return {tonumber(redis.call('get', KEYS[1]) or '0'), redis.call('zcard', KEYS[2]),
  redis.call('exists', KEYS[1])}
