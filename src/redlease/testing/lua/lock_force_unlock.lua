
-- RLock.forceUnlock: delete the lock whoever holds it; a deletion wakes the waiters.
-- KEYS[1] lock hash; KEYS[2] unlock channel; ARGV[1] unlock message; ARGV[2] publish command
-- Reply: 1 deleted, 0 it was free
local deleted = redis.call('del', KEYS[1])
if deleted == 1 then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return deleted
