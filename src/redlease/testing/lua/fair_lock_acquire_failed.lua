
-- acquireFailedAsync: a waiter gives up; the places behind it move up by its wait.
-- KEYS: line, places. ARGV: field, wait ms. Reply: nil
local line, places, me, wait = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local waiters = redis.call('lrange', line, 0, -1)
local behind = false
for _, waiter in ipairs(waiters) do
  if behind then
    redis.call('zincrby', places, -wait, waiter)
  elseif waiter == me then
    behind = true
  end
end
redis.call('zrem', places, me)
redis.call('lrem', line, 0, me)
