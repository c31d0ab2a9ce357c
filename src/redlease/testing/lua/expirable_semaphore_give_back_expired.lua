
local function give_back_expired(now, most)
  local gone = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, most)
  if #gone == 0 then return end
  for _, id in ipairs(gone) do redis.call('zrem', KEYS[2], id) end
  local count = redis.call('incrby', KEYS[1], #gone)
  if count > 0 then redis.call('publish', KEYS[3], count) end
end
