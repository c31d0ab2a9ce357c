-- Release an owner's last hold of a reentrant lock but keep the lock taken, by no one, for a
-- given time, then let it expire (a scheduled job's at-least time, ShedLock's lockAtLeastFor).
-- KEYS[1]  lock key (hash {owner field -> hold count}, see lock_acquire.lua)
-- KEYS[2]  release receipts key (see lock_release.lua): this release's request id is added
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller believes it has: 1 (only a final release can keep the lock)
-- ARGV[3]  request id (unique per release call, reused by a retry of the same call)
-- ARGV[4]  the fencing token of the caller's hold (0: not known): only the hold with that
--          token is released, never another hold of the same owner field
-- ARGV[5]  how long the lock stays taken, in milliseconds (> 0): the key's TTL is set to it
-- ARGV[6]  1 when the owner's last re-entrant acquire had an unknown outcome (its reply was
--          lost), so the count may be one above what it believes: that hold goes too; else 0
-- Reply    {code, hold_count, ttl_ms}
--   1 RELEASED  hold_count 0: the caller holds nothing any more; ttl_ms is how long the lock
--               stays taken (for a retry of a release that already ran: the key's PTTL now,
--               -2 when it is gone)
--  -1 LOST      the caller's hold is gone (lease expired, force-released, or the hold there
--               has another token); nothing changed
-- The owner's field becomes "<owner field>:kept" (count 1), a holder that no owner is, so
-- that every acquire, the caller's own included, finds the lock held until the key expires
-- (a status shows it held, by that field); field "redlease:lease" (the wait bound an acquire
-- answers) becomes the time kept. No waiter is woken: none could take it before it expires,
-- and each re-checks by itself within its usual bound. The fencing token stays in the hash.
-- Receipts: as a final lock_release.lua does, the ids the lock carried (field
-- "redlease:released": releases that handed it over) and this request's id are appended to
-- those in KEYS[2] (the newest last, cut back to whole ids within RECEIPT_BYTES when the key
-- grows past twice that), which is kept for 30 s, so that they outlive the kept key;
-- a retry of this call, or of a plain release with the same request id, is recognised: it
-- answers RELEASED and changes nothing.
local RECEIPT_BYTES = 16 * 34 -- the last 16 receipts at least
local expected = tonumber(ARGV[2])
if expected ~= 1 then
  return redis.error_reply('ERR redlease: ARGV[2] must be 1: only a final release keeps the lock')
end
local keep = tonumber(ARGV[5])
if not keep or keep <= 0 then
  return redis.error_reply('ERR redlease: ARGV[5] must be a positive number of milliseconds')
end
local fields = redis.call('hmget', KEYS[1], ARGV[1], 'redlease:fence', 'redlease:released')
local count = tonumber(fields[1] or '0')
local mine = tonumber(ARGV[4] or '0')
if count > 0 and mine ~= 0 and tonumber(fields[2] or '0') ~= mine then
  count = 0 -- another hold of the same owner field: not the caller's
end
if count >= expected and count <= expected + tonumber(ARGV[6]) then
  local receipts = ARGV[3]
  if fields[3] then
    receipts = fields[3] .. ' ' .. receipts
  end
  local holder = ARGV[1] .. ':kept'
  redis.call('hdel', KEYS[1], ARGV[1])
  redis.call('hset', KEYS[1], holder, 1, 'redlease:lease', keep)
  redis.call('pexpire', KEYS[1], keep)
  if redis.call('append', KEYS[2], ' ' .. receipts) > 2 * RECEIPT_BYTES then
    local list = redis.call('get', KEYS[2])
    list = string.match(string.sub(list, -RECEIPT_BYTES - 1), '^%S* (.*)$') or ARGV[3]
    redis.call('set', KEYS[2], list, 'px', 30000)
  else
    redis.call('pexpire', KEYS[2], 30000)
  end
  return {1, 0, keep}
end
if count == 0 then
  -- a retry of a final release that already ran (this one, or a plain one with this id)
  local receipts = (fields[3] or '') .. ' ' .. (redis.call('get', KEYS[2]) or '')
  if string.find(' ' .. receipts .. ' ', ' ' .. ARGV[3] .. ' ', 1, true) then
    return {1, 0, redis.call('pttl', KEYS[1])}
  end
end
return {-1, count, 0}
