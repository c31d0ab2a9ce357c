-- RFasterMultiLock.tryLock's script effects: every value or none. A value held by another
-- thread whose end (the Java client's clock) is still ahead blocks the whole set; else each
-- value gets the caller as holder, an end of now + lease (never earlier than it was) and one
-- more hold in its count, and the key's TTL at least the lease.
-- KEYS[1] the group's hash
-- ARGV[1] lease ms; ARGV[2] now, ms since the epoch (the Java client's clock); ARGV[3] the
-- thread's field "<client id>:<thread id>"; ARGV[4..] the values' hashes
-- Reply: nil acquired, else the ms until the latest end among the values that block
local lease, now, me = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local existed = redis.call('exists', KEYS[1]) == 1
local latest = -1
for i = 4, #ARGV do
  local holder = redis.call('hget', KEYS[1], ARGV[i])
  if holder and holder ~= me then
    local ends = tonumber(redis.call('hget', KEYS[1], ARGV[i] .. ':' .. holder .. ':expire_time')
      or '-1')
    if ends > now and ends > latest then
      latest = ends
    end
  end
end
if latest ~= -1 then
  return latest - now
end
for i = 4, #ARGV do
  local ends_field = ARGV[i] .. ':' .. me .. ':expire_time'
  redis.call('hset', KEYS[1], ARGV[i], me)
  local ends = tonumber(redis.call('hget', KEYS[1], ends_field) or '-1')
  if ends < now + lease then
    redis.call('hset', KEYS[1], ends_field, now + lease)
  end
  redis.call('hincrby', KEYS[1], ARGV[i] .. ':' .. me .. ':lock_count', 1)
end
local ttl = redis.call('pttl', KEYS[1])
if not existed or (ttl > 0 and ttl < lease) then
  redis.call('pexpire', KEYS[1], lease)
end
return nil
