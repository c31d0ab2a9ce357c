-- A waiter gives up (timeout, cancellation, error): leave the line, and if the lock was
-- handed to it meanwhile, free it and wake the others.
-- KEYS[1]  lock key
-- KEYS[2]  unlock channel
-- KEYS[3]  the line (zset, see lock_acquire.lua)
-- KEYS[4]  release receipts key (see lock_release.lua): the receipts a hold given back
--          carried (of releases that handed it over) are kept there for 30 s, as a final
--          release keeps them, so a retry of one of those releases is still recognised
-- ARGV[1]  owner field of the waiter
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  the wait id of the acquire call that gives up: a hold is given back only if it
--          was made for that call (a hand-over, or a grant whose reply was lost); never an
--          outer hold of a re-entering owner, nor a hold of a later call that this request,
--          delivered late, would otherwise free
-- ARGV[4]  the hand-over lease of its place, as the acquire call sent it
-- Reply    1 when a hand-over to the waiter (or a grant whose reply was lost) was given
--          back, else 0
-- The wake-up it publishes is a hint, sent by pcall: a user the server does not let publish
-- still gets this done (waiters re-check on their own within 5 s).
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
local place = ARGV[1] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4]
redis.call('zrem', KEYS[3], place)
local fields = redis.call('hmget', KEYS[1], ARGV[1], 'redlease:wait', 'redlease:released')
if fields[1] == '1' and fields[2] == ARGV[3] then
  if fields[3] then
    -- appended, the newest last, cut back to whole ids within 16 x 34 bytes when the key
    -- grows past twice that, as lock_release.lua keeps them
    if redis.call('append', KEYS[4], ' ' .. fields[3]) > 2 * 16 * 34 then
      local list = redis.call('get', KEYS[4])
      list = string.match(string.sub(list, -16 * 34 - 1), '^%S* (.*)$') or fields[3]
      redis.call('set', KEYS[4], list, 'px', 30000)
    else
      redis.call('pexpire', KEYS[4], 30000)
    end
  end
  redis.call('del', KEYS[1])
  redis.pcall(ARGV[2], KEYS[2], '0')
  return 1
end
return 0
