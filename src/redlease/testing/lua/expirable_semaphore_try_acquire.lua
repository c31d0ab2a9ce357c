
-- ARGV: permits, lease end, now, non-expirable mark, ids...
give_back_expired(tonumber(ARGV[3]), tonumber(ARGV[1]))
local count = redis.call('get', KEYS[1])
if count and tonumber(count) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  for i = 5, #ARGV do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]) end
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end
  return {1}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[2] and first[2] ~= ARGV[4] then return {0, tonumber(first[2])} end
return {0}
