-- One turn of Redisson's watchdog for an RFasterMultiLock (FastMultilockTask): while the
-- thread holds every value, each value's end becomes now + lease (never earlier) and the
-- key's TTL at least the lease.
-- KEYS[1] the group's hash
-- ARGV[1] lease ms; ARGV[2] now, ms since the epoch; ARGV[3] the thread's field;
-- ARGV[4..] the values' hashes
-- Reply: 1 renewed, 0 a value is not the thread's (the watchdog stops)
local lease, now, me = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
for i = 4, #ARGV do
  if redis.call('hget', KEYS[1], ARGV[i]) ~= me then
    return 0
  end
  local ends_field = ARGV[i] .. ':' .. me .. ':expire_time'
  if tonumber(redis.call('hget', KEYS[1], ends_field) or '-1') < now + lease then
    redis.call('hset', KEYS[1], ends_field, now + lease)
  end
end
if redis.call('pttl', KEYS[1]) < lease then
  redis.call('pexpire', KEYS[1], lease)
end
return 1
