-- Renew many owners' holds on one side of a read-write lock kept in Redisson's layout.
-- KEYS[1]  the lock: a hash {"mode" -> "read" or "write", reader field -> read hold count,
--          "<field>:write" -> write hold count}; its TTL is the longest lease of any hold
-- KEYS[2]  tokens: hash {field -> fencing token of its first hold} (redlease's own key)
-- KEYS[3]  the prefix of every hold's lease key, "<tagged name>:" (a read hold's lease key is
--          "<prefix><field>:rwlock_timeout:<n>", named in the script as Redisson's are)
-- ARGV[1]  lease in milliseconds (at least 1; anything else is refused before any change)
-- ARGV[2]  side: "read" or "write"
-- ARGV[3..2n+2]  the fields whose holds on that side to renew (a writer's ends in ":write";
--          ARGV[3] to ARGV[n+2]), then the fencing token of each field's hold, in the same
--          order (ARGV[n+3] on; no caller sends 0; a hold without a stored token matches no
--          token)
-- Reply    array of n integers: 1 renewed, 0 the hold is gone
-- A hold is alive while its field is in the lock (Redisson's rule) with the owner's token in
-- the tokens hash: another hold of the same field (a stale copy after a failover to a replica
-- that missed the owner's release and its next acquire) is not renewed, and the owner hears
-- its hold is gone. A renewal sets a lease key for each of a reader's holds again, so that
-- another reader's release, which keeps the lock for the longest lease left, counts them. It
-- never shortens a longer lease.
local function hold_key(field, n) -- Redisson names each read hold's lease key this way
  return KEYS[3] .. field .. ':rwlock_timeout:' .. n
end
local lease = tonumber(ARGV[1])
if not (lease and lease >= 1) then -- (NaN too)
  return redis.error_reply('ERR redlease: ARGV[1] must be a lease of at least 1 millisecond')
end
local n = (#ARGV - 2) / 2
local out = {}
for i = 1, n do
  local field = ARGV[i + 2]
  local holds = tonumber(redis.call('hget', KEYS[1], field) or '0')
  out[i] = 0
  if holds > 0
      and tonumber(redis.call('hget', KEYS[2], field) or '-1') == tonumber(ARGV[n + i + 2]) then
    if redis.call('pttl', KEYS[1]) < lease then
      redis.call('pexpire', KEYS[1], lease)
    end
    if redis.call('pttl', KEYS[2]) < lease then
      redis.call('pexpire', KEYS[2], lease)
    end
    if ARGV[2] == 'read' then
      for k = 1, holds do
        redis.call('set', hold_key(field, k), 1, 'px', lease)
      end
    end
    out[i] = 1
  end
end
return out
