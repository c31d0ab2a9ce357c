-- Renew the leases of many holds on one side of one read-write lock (the watchdog's batch).
-- KEYS[1]  writer: hash {writer, count, deadline, token} (see rw_write_acquire.lua)
-- KEYS[2]  reader hold counts: hash {owner field -> read hold count}
-- KEYS[3]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[4]  reader tokens: hash {owner field -> fencing token}
-- ARGV[1]  lease in milliseconds (at least 1; anything else is refused before any change)
-- ARGV[2]  side: "read" or "write"
-- ARGV[3..2n+2]  the owner fields whose holds on that side to renew (ARGV[3] to ARGV[n+2]),
--          then the fencing token of each owner's hold on that side, in the same order
--          (ARGV[n+3] on; no caller sends 0; a hold without a stored token matches no token)
-- Reply    array of n integers: 1 renewed (or already longer), 0 the hold is gone
-- A renewal never revives a hold whose lease ran out, never shortens a longer lease, and
-- never renews another hold of the same owner field than the one with the owner's token (a
-- stale copy after a failover to a replica that missed the owner's release and its next
-- acquire): the owner hears its hold is gone.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
if not (lease and lease >= 1) then -- (NaN too)
  return redis.error_reply('ERR redlease: ARGV[1] must be a lease of at least 1 millisecond')
end
local n = (#ARGV - 2) / 2
local out = {}
for i = 1, n do
  local owner = ARGV[i + 2]
  local token = tonumber(ARGV[n + i + 2])
  out[i] = 0
  if ARGV[2] == 'write' then
    local held = redis.call('hmget', KEYS[1], 'writer', 'deadline', 'token')
    local ends = tonumber(held[2] or '0')
    if held[1] == owner and ends > now and tonumber(held[3] or '-1') == token then
      redis.call('hset', KEYS[1], 'deadline', math.max(ends, now + lease))
      if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
      end
      out[i] = 1
    end
  else
    local ends = tonumber(redis.call('zscore', KEYS[3], owner) or '0')
    if ends > now and tonumber(redis.call('hget', KEYS[4], owner) or '-1') == token then
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
      out[i] = 1
    end
  end
end
return out
