-- RFasterMultiLock.unlock's script effects, with its unlock latch (a command sent again gets
-- the first answer). Each value whose end (Java client's clock) is not passed loses one hold
-- of the thread's; at 0 its three fields go. A value the thread does not hold (or whose end
-- passed) makes the answer nil, the others still counted down. "0" is published when a value
-- was freed.
-- KEYS[1] the group's hash; KEYS[2] unlock channel; KEYS[3] this request's unlock latch
-- ARGV[1] the thread's field; ARGV[2] unlock message; ARGV[3] lease ms; ARGV[4] publish
-- command; ARGV[5] how long the latch is kept, ms; ARGV[6] now, ms since the epoch;
-- ARGV[7..] the values' hashes
-- Reply: 1 every value freed, 0 some still held (re-entered), nil not the thread's
local answered = redis.call('get', KEYS[3])
if answered then
  return tonumber(answered)
end
if redis.call('exists', KEYS[1]) == 0 then
  redis.call(ARGV[4], KEYS[2], ARGV[2])
  return nil
end
local me, now, lease = ARGV[1], tonumber(ARGV[6]), tonumber(ARGV[3])
local failed, all_freed, freed = false, 1, false
for i = 7, #ARGV do
  local ends_field = ARGV[i] .. ':' .. me .. ':expire_time'
  local count_field = ARGV[i] .. ':' .. me .. ':lock_count'
  local ends = tonumber(redis.call('hget', KEYS[1], ends_field) or '-1')
  if ends >= now then
    if redis.call('hincrby', KEYS[1], count_field, -1) <= 0 then
      redis.call('hdel', KEYS[1], ends_field, count_field, ARGV[i])
      freed = true
    else
      if ends < now + lease then
        redis.call('hset', KEYS[1], ends_field, now + lease)
      end
      all_freed = 0
    end
  else
    all_freed, failed = 0, true
  end
end
if failed then
  return nil
end
if freed then
  redis.call(ARGV[4], KEYS[2], ARGV[2])
end
redis.call('set', KEYS[3], all_freed, 'px', ARGV[5])
if all_freed == 0 and redis.call('pttl', KEYS[1]) < lease then
  redis.call('pexpire', KEYS[1], lease)
end
return all_freed
