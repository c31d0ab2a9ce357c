
local lock, channel, lease, me = KEYS[1], KEYS[2], tonumber(ARGV[1]), ARGV[2]
local mode = redis.call('hget', lock, 'mode')
if not mode then
  redis.call('publish', channel, '1')
  return 1
end
if mode ~= 'write' or redis.call('hexists', lock, me) == 0 then
  return nil
end
if redis.call('hincrby', lock, me, -1) > 0 then
  redis.call('pexpire', lock, lease)
  return 0
end
redis.call('hdel', lock, me)
if redis.call('hlen', lock) > 1 then
  redis.call('hset', lock, 'mode', 'read') -- the writer's own read holds stay
else
  redis.call('del', lock)
  redis.call('publish', channel, '1')
end
return 1
