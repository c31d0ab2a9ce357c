-- An acquire call of a group lock gives up (an error, a cancellation, its time ran out): a
-- first hold made for that very call (its reply was lost) is given back; nothing else is
-- touched (see group_lock_acquire.lua). No line to leave: a group lock has none.
-- KEYS[1]  the group's hash
-- KEYS[2]  unlock channel "redisson_lock__channel:{<group>}"
-- ARGV[1]  owner field
-- ARGV[2]  the acquire call's wait id
-- ARGV[3]  set id
-- ARGV[4]  publish command: 'publish' or 'spublish' (anything else is refused before any
--          change)
-- ARGV[5..] the values' field names
-- Reply    1 when a hold made for the call was given back (its values freed, waiters woken),
--          else 0. Sent twice, the second finds nothing.
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[4] must be publish or spublish')
end
local hold_field = 'redlease:hold:' .. ARGV[1] .. ':' .. ARGV[3]
local count, wait = string.match(redis.call('hget', KEYS[1], hold_field) or '', '^(%d+) (%S*)$')
if count ~= '1' or wait ~= ARGV[2] then
  return 0
end
for i = 5, #ARGV do
  local prefix = ARGV[i] .. ':' .. ARGV[1]
  if redis.call('hget', KEYS[1], ARGV[i]) == ARGV[1]
      and redis.call('hincrby', KEYS[1], prefix .. ':lock_count', -1) <= 0 then
    redis.call('hdel', KEYS[1], ARGV[i], prefix .. ':expire_time', prefix .. ':lock_count')
  end
end
redis.call('hdel', KEYS[1], hold_field, 'redlease:fence:' .. ARGV[1] .. ':' .. ARGV[3])
redis.pcall(ARGV[4], KEYS[2], '0')
return 1
