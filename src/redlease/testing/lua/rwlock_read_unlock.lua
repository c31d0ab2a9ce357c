
local lock, channel, my_lease_key, prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local me = ARGV[1]
local mode = redis.call('hget', lock, 'mode')
if not mode then
  redis.call('publish', channel, '0')
  return 1
end
if redis.call('hexists', lock, me) == 0 then
  return nil
end
local left = redis.call('hincrby', lock, me, -1)
if left == 0 then
  redis.call('hdel', lock, me)
end
redis.call('del', my_lease_key .. ':' .. (left + 1))
if redis.call('hlen', lock) > 1 then
  local longest = -3
  for _, who in ipairs(redis.call('hkeys', lock)) do
    local holds = tonumber(redis.call('hget', lock, who))
    if type(holds) == 'number' then
      for k = 1, holds do
        local lease_key = prefix .. ':' .. who .. ':rwlock_timeout:' .. k
        longest = math.max(longest, redis.call('pttl', lease_key))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', lock, longest)
    return 0
  end
  if mode == 'write' then
    return 0
  end
end
redis.call('del', lock)
redis.call('publish', channel, '0')
return 1
