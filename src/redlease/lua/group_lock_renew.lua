-- Renew group lock holds: one entry of the watchdog per hold (an owner's hold of one set of
-- values), each renewing every value of the hold (see group_lock_acquire.lua).
-- KEYS[1]  the group's hash
-- ARGV[1]  lease in milliseconds (at least 1; anything else is refused before any change)
-- ARGV[2]  set id
-- ARGV[3]  n: how many values the set has
-- ARGV[4..n+3] the values' field names
-- ARGV[n+4..] the owner field of each hold, then the fencing token of each, in the same order
-- Reply    one integer per hold: 1 renewed (every value's end moved to now + lease, if later;
--          the key's TTL at least the lease), 0 the hold is gone (a value is no longer the
--          owner's and live, or the hold there has another token): nothing changed for it
-- A renewal never creates a field nor revives a value whose hold ran out.
local lease = tonumber(ARGV[1])
if not (lease and lease >= 1) then -- (NaN too)
  return redis.error_reply('ERR redlease: ARGV[1] must be a lease of at least 1 millisecond')
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local n = tonumber(ARGV[3])
local holds = (#ARGV - 3 - n) / 2
local out = {}
for h = 1, holds do
  local owner = ARGV[3 + n + h]
  local token = redis.call('hget', KEYS[1], 'redlease:fence:' .. owner .. ':' .. ARGV[2])
  local live = token and tonumber(token) == tonumber(ARGV[3 + n + holds + h])
  for i = 4, 3 + n do
    if not live then
      break
    end
    local ends = redis.call('hget', KEYS[1], ARGV[i] .. ':' .. owner .. ':expire_time')
    live = redis.call('hget', KEYS[1], ARGV[i]) == owner and tonumber(ends or '0') >= now_ms
  end
  out[h] = 0
  if live then
    for i = 4, 3 + n do
      local field = ARGV[i] .. ':' .. owner .. ':expire_time'
      if tonumber(redis.call('hget', KEYS[1], field)) < now_ms + lease then
        redis.call('hset', KEYS[1], field, now_ms + lease)
      end
    end
    if redis.call('pttl', KEYS[1]) < lease then
      redis.call('pexpire', KEYS[1], lease)
    end
    out[h] = 1
  end
end
return out
