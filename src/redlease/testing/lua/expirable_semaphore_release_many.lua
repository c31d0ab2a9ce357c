
-- ARGV: now, ids...: none is given back unless every one is leased and not run out
for i = 2, #ARGV do
  local ends = redis.call('zscore', KEYS[2], ARGV[i])
  if not ends or tonumber(ends) <= tonumber(ARGV[1]) then return 0 end
end
give_back_expired(tonumber(ARGV[1]), -1)
local n = 0
for i = 2, #ARGV do n = n + redis.call('zrem', KEYS[2], ARGV[i]) end
redis.call('incrby', KEYS[1], n)
redis.call('publish', KEYS[3], n)
return n
