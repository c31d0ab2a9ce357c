
-- ARGV: id, now
local ends = redis.call('zscore', KEYS[2], ARGV[1])
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('publish', KEYS[3], redis.call('incrby', KEYS[1], 1))
if tonumber(ends) <= tonumber(ARGV[2]) then return 0 end
return 1
