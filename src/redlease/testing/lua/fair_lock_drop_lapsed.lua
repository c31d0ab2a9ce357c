
local function drop_lapsed(line, places, now)
  while true do
    local first = redis.call('lindex', line, 0)
    if not first then
      return
    end
    local lapses = redis.call('zscore', places, first)
    if not lapses or tonumber(lapses) > now then
      return  -- (a first waiter without a place stays: Redisson breaks there too)
    end
    redis.call('zrem', places, first)
    redis.call('lpop', line)
  end
end
local function take(lock, line, places, me, lease, wait)
  -- free, and the caller's turn: it leaves the line, everyone moves up one wait, it holds
  redis.call('lpop', line)
  redis.call('zrem', places, me)
  for _, waiter in ipairs(redis.call('zrange', places, 0, -1)) do
    redis.call('zincrby', places, -wait, waiter)
  end
  redis.call('hset', lock, me, 1)
  redis.call('pexpire', lock, lease)
end
