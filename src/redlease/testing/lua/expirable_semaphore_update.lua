
-- ARGV: id, new lease end, now
give_back_expired(tonumber(ARGV[3]), -1)
if not redis.call('zscore', KEYS[2], ARGV[1]) then return 0 end
redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
return 1
