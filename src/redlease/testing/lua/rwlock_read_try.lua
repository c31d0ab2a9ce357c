
local lock, my_lease_key, lease = KEYS[1], KEYS[2], tonumber(ARGV[1])
local me, my_write = ARGV[2], ARGV[3]
local mode = redis.call('hget', lock, 'mode')
local allowed = (not mode) or mode == 'read' or redis.call('hexists', lock, my_write) == 1
if not allowed then
  return redis.call('pttl', lock)
end
if not mode then
  redis.call('hset', lock, 'mode', 'read')
end
local n = redis.call('hincrby', lock, me, 1)
redis.call('set', my_lease_key .. ':' .. n, '1', 'px', lease)
redis.call('pexpire', lock, math.max(lease, redis.call('pttl', lock)))
return nil
