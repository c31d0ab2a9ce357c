-- Give up an acquire whose outcome is unknown (its replies were lost, or its caller gave up):
-- give its permits back if it was granted, and make sure a late copy of it takes none.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  semaphore channel; the new count is published when permits come back
-- KEYS[3]  receipt of the acquire request (see semaphore_acquire.lua)
-- ARGV[1]  permits the acquire asked for (a drain's count is in its receipt)
-- ARGV[2]  how long the receipt (now a tombstone) is kept, ms
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    {code, available}
--   1 UNDONE   the acquire had been granted: its permits are back
--   0 NOTHING  it never ran (a late copy now takes nothing) or was undone before: unchanged
-- The wake-up it publishes is a hint, sent by pcall: a user the server does not let publish
-- still gets this done (waiters re-check on their own within 5 s).
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[3] must be publish or spublish')
end
local receipt = redis.call('get', KEYS[3])
local available = tonumber(redis.call('get', KEYS[1]) or '0')
redis.call('set', KEYS[3], '0', 'px', ARGV[2])
local permits = tonumber(ARGV[1])
if tonumber(receipt or '0') < 0 then -- a drain (semaphore_drain.lua): minus its count
  permits, receipt = -tonumber(receipt), '1'
end
if receipt ~= '1' or redis.call('exists', KEYS[1]) == 0 then
  return {0, available}
end
available = redis.call('incrby', KEYS[1], permits)
if available > 0 then -- (a count below one, left by permits taken away, wakes no one)
  redis.pcall(ARGV[3], KEYS[2], available)
end
return {1, available}
