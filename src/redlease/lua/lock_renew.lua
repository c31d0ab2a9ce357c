-- Renew the leases of many held locks in one call (the watchdog's batch).
-- KEYS[1..2n] the lock keys (KEYS[1] to KEYS[n]), then each lock's fencing counter key, in the
--             same order (KEYS[n+1] on; see lock_acquire.lua: the last token handed out). The
--             counter keys may be left out (the lock keys alone, n of them: the number of locks
--             is taken from ARGV): on a cluster, where a slot being migrated may hold a lock's
--             key and not its counter (TRYAGAIN for a script whose keys are split, which would
--             fail the renewal until the move ends); without them a gone hold answers 0
-- ARGV[1]     lease in milliseconds (at least 1; anything else is refused before any change:
--             a lease of 0 would delete a key without a TTL, never renew it)
-- ARGV[2..2n+1] the owner field for each key, in the same order (ARGV[2] to ARGV[n+1]), then
--             the fencing token of each owner's hold, in the same order (ARGV[n+2] on; 0: not
--             known, as a Redlock owner's on each master: the owner field alone decides)
-- Reply       array of n integers: 1 renewed (or already longer), 0 the hold is gone, 2 the hold
--             is gone and the lock's fencing counter is below its token (missing, or behind):
--             the server lost the grant with its data (a restart without persistence, a
--             failover to a replica that had not seen it); never 2 for a token of 0, nor
--             without the counter keys. 0 and 2 both say gone; 2 only says why
-- A renewal never creates a key, so it cannot revive a released lock, never shortens a
-- longer lease that a hold asked for, and never renews another hold of the same owner field
-- than the one with the owner's token (a stale copy after a failover to a replica that missed
-- the owner's release and its next acquire).
local lease = tonumber(ARGV[1])
if not (lease and lease >= 1) then -- (NaN too)
  return redis.error_reply('ERR redlease: ARGV[1] must be a lease of at least 1 millisecond')
end
local n = (#ARGV - 1) / 2
local counters = #KEYS == 2 * n
local out = {}
for i = 1, n do
  local fields = redis.call('hmget', KEYS[i], ARGV[i + 1], 'redlease:fence')
  local token = tonumber(ARGV[n + i + 1] or '0')
  if fields[1] and (token == 0 or tonumber(fields[2] or '0') == token) then
    if redis.call('pttl', KEYS[i]) < lease then
      redis.call('pexpire', KEYS[i], lease)
    end
    out[i] = 1
  elseif counters and token > 0 and tonumber(redis.call('get', KEYS[n + i]) or '0') < token then
    out[i] = 2
  else
    out[i] = 0
  end
end
return out
