
-- forceUnlockAsync. KEYS: lock, line, places, unlock channel. ARGV: "0", now ms, publish
-- command. Reply: 1 deleted (the first waiter woken), 0 it was free
drop_lapsed(KEYS[2], KEYS[3], tonumber(ARGV[2]))
if redis.call('del', KEYS[1]) == 1 then
  local first = redis.call('lindex', KEYS[2], 0)
  if first then
    redis.call(ARGV[3], KEYS[4] .. ':' .. first, ARGV[1])
  end
  return 1
end
return 0
