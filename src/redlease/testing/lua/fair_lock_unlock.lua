
-- unlockInnerAsync, with the unlock latch (the answer kept under the request id).
-- KEYS: lock, line, places, unlock channel, latch. ARGV: "0", lease ms, field, now ms,
-- publish command, latch ms. Reply: 1 freed (or already free), 0 still held, nil not held
local lock, line, places, channel, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local answered = redis.call('get', latch)
if answered then
  return tonumber(answered)
end
drop_lapsed(line, places, tonumber(ARGV[4]))
local function wake_first()
  local first = redis.call('lindex', line, 0)
  if first then
    redis.call(ARGV[5], channel .. ':' .. first, ARGV[1])
  end
end
if redis.call('exists', lock) == 0 then
  wake_first()
  redis.call('set', latch, 1, 'px', ARGV[6])
  return 1
end
if redis.call('hexists', lock, ARGV[3]) == 0 then
  return nil
end
if redis.call('hincrby', lock, ARGV[3], -1) > 0 then
  redis.call('pexpire', lock, ARGV[2])
  redis.call('set', latch, 0, 'px', ARGV[6])
  return 0
end
redis.call('del', lock)
redis.call('set', latch, 1, 'px', ARGV[6])
wake_first()
return 1
