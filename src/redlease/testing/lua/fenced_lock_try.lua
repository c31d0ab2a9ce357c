-- One try of RFencedLock.tryLockAndGetToken: take the lock or enter it again, and take the
-- next fencing token from the lock's token key, or learn how long it stays held.
-- KEYS[1] lock hash; KEYS[2] token key "redisson_lock_token:{name}" (a counter, no TTL)
-- ARGV[1] lease ms; ARGV[2] holder field "<client-id>:<thread-id>"
-- Reply: {-1, token} = held by the caller now (count + 1, the lease restarted; every
-- acquisition, a re-entry too, INCRs the token key), or {remaining TTL in ms, -1} of a lock
-- that someone else holds (any other field, even redlease's)
if redis.call('exists', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return {redis.call('pttl', KEYS[1]), -1}
end
local token = redis.call('incr', KEYS[2])
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return {-1, token}
