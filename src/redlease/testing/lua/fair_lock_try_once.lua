
-- tryLockInnerAsync(EVAL_NULL_BOOLEAN): tryLock() without a wait; never joins the line.
-- KEYS: lock, line, places. ARGV: lease ms, field, now ms, wait ms. Reply: nil held, 1 not
local lock, line, places = KEYS[1], KEYS[2], KEYS[3]
local lease, me, now, wait = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
drop_lapsed(line, places, now)
local first = redis.call('lindex', line, 0)
if redis.call('exists', lock) == 0 and (not first or first == me) then
  take(lock, line, places, me, lease, wait)
  return nil
end
if redis.call('hexists', lock, me) == 1 then
  redis.call('hincrby', lock, me, 1)
  redis.call('pexpire', lock, lease)
  return nil
end
return 1
