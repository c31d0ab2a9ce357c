-- Free a group lock's values whoever holds them (Redisson's forceUnlock of RFasterMultiLock),
-- and wake the waiters.
-- KEYS[1]  the group's hash
-- KEYS[2]  unlock channel "redisson_lock__channel:{<group>}"
-- ARGV[1]  publish command: 'publish' or 'spublish' (anything else is refused before any
--          change)
-- ARGV[2..] the values' field names
-- Reply    1 when one of them was held live, else 0. Each holder's hold is gone: its next
--          renewal, release or re-entry finds so.
if ARGV[1] ~= 'publish' and ARGV[1] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[1] must be publish or spublish')
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local held = 0
for i = 2, #ARGV do
  local holder = redis.call('hget', KEYS[1], ARGV[i])
  if holder then
    local prefix = ARGV[i] .. ':' .. holder
    if tonumber(redis.call('hget', KEYS[1], prefix .. ':expire_time') or '0') >= now_ms then
      held = 1
    end
    redis.call('hdel', KEYS[1], ARGV[i], prefix .. ':expire_time', prefix .. ':lock_count')
  end
end
redis.pcall(ARGV[1], KEYS[2], '0')
return held
