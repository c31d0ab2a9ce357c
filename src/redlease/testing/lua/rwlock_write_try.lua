
local lock, lease, me = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local mode = redis.call('hget', lock, 'mode')
if not mode then
  redis.call('hset', lock, 'mode', 'write', me, 1)
  redis.call('pexpire', lock, lease)
  return nil
end
if mode == 'write' and redis.call('hexists', lock, me) == 1 then
  redis.call('hincrby', lock, me, 1)
  redis.call('pexpire', lock, redis.call('pttl', lock) + lease)
  return nil
end
return redis.call('pttl', lock)
