-- Renew the leases of many holds on one side of one read-write lock (the watchdog's batch).
-- KEYS[1]  writer: hash {writer, count, deadline, token} (see rw_write_acquire.lua)
-- KEYS[2]  reader hold counts: hash {owner field -> read hold count}
-- KEYS[3]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[4]  reader tokens: hash {owner field -> fencing token}
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  side: "read" or "write"
-- ARGV[3..n+2]  owner fields whose holds on that side to renew
-- Reply    array of n integers: 1 renewed (or already longer), 0 the hold is gone
-- A renewal never revives a hold whose lease ran out, and never shortens a longer lease.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local out = {}
for i = 3, #ARGV do
  local owner = ARGV[i]
  out[i - 2] = 0
  if ARGV[2] == 'write' then
    local ends = tonumber(redis.call('hget', KEYS[1], 'deadline') or '0')
    if redis.call('hget', KEYS[1], 'writer') == owner and ends > now then
      redis.call('hset', KEYS[1], 'deadline', math.max(ends, now + lease))
      if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
      end
      out[i - 2] = 1
    end
  else
    local ends = tonumber(redis.call('zscore', KEYS[3], owner) or '0')
    if ends > now then
      redis.call('zadd', KEYS[3], math.max(ends, now + lease), owner)
      if redis.call('pttl', KEYS[2]) < lease then
        redis.call('pexpire', KEYS[2], lease)
      end
      if redis.call('pttl', KEYS[3]) < lease then
        redis.call('pexpire', KEYS[3], lease)
      end
      if redis.call('pttl', KEYS[4]) < lease then
        redis.call('pexpire', KEYS[4], lease)
      end
      out[i - 2] = 1
    end
  end
end
return out
