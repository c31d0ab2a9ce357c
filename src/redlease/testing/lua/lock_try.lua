
-- One try of RLock.tryLock: take the lock or enter it again, or learn how long it stays held.
-- KEYS[1] lock hash; ARGV[1] lease ms; ARGV[2] holder field "<client-id>:<thread-id>"
-- Reply: nil = held by the caller now (its count + 1, the lease restarted), or the
-- remaining TTL in ms of a lock that someone else holds (any other field, even redlease's)
local ours = redis.call('hexists', KEYS[1], ARGV[2]) == 1
if not ours and redis.call('exists', KEYS[1]) == 1 then
  return redis.call('pttl', KEYS[1])
end
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return nil
