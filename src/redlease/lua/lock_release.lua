-- Release one hold of a reentrant lock; the last one deletes the key and wakes waiters.
-- KEYS[1]  lock key (hash {owner field -> hold count})
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- KEYS[3]  release receipt key (same hash slot): remembers the request id of a final release
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller believes it has
-- ARGV[3]  request id (unique per release call, reused by a retry of the same call)
-- ARGV[4]  receipt lifetime in milliseconds (how long a retry can still be recognised)
-- ARGV[5]  unlock message published to waiters ("0", as Redisson sends)
-- Reply    {code, hold_count}
--   1 RELEASED  hold_count is what remains; 0 means the key was deleted and waiters woken
--  -1 LOST      the caller's hold is gone (lease expired, force-released); nothing changed
-- A retry of a release that already ran answers RELEASED again and changes nothing.
local expected = tonumber(ARGV[2])
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
if count == expected and count > 0 then
  if count > 1 then
    redis.call('hincrby', KEYS[1], ARGV[1], -1)
    return {1, count - 1}
  end
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], ARGV[5])
  redis.call('set', KEYS[3], ARGV[3], 'px', ARGV[4])
  return {1, 0}
end
if count > 0 and count == expected - 1 then
  return {1, count}
end
if count == 0 and expected == 1 and redis.call('get', KEYS[3]) == ARGV[3] then
  return {1, 0}
end
return {-1, count}
