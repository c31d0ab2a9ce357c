
-- RLock.unlock with its unlock latch (the answer kept under the request id, so that a
-- command sent again gets the same answer instead of unlocking twice).
-- KEYS[1] lock hash; KEYS[2] unlock channel; KEYS[3] this request's unlock latch
-- ARGV[1] unlock message; ARGV[2] lease ms; ARGV[3] holder field; ARGV[4] publish command;
-- ARGV[5] how long the latch is kept, ms
-- Reply: 1 freed (deleted, message published), 0 still held (count - 1, lease restarted),
-- nil the caller holds nothing
local answered = redis.call('get', KEYS[3])
if answered then
  return tonumber(answered)
end
local count = redis.call('hget', KEYS[1], ARGV[3])
if not count then
  return nil
end
local freed = 0
if tonumber(count) > 1 then
  redis.call('hset', KEYS[1], ARGV[3], tonumber(count) - 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
else
  redis.call('del', KEYS[1])
  redis.call(ARGV[4], KEYS[2], ARGV[1])
  freed = 1
end
redis.call('set', KEYS[3], freed, 'px', ARGV[5])
return freed
