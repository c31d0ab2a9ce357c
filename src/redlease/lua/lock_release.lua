-- Release one hold of a reentrant lock; the last one deletes the key and wakes waiters.
-- KEYS[1]  lock key (hash {owner field -> hold count})
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- KEYS[3]  release receipt key (same hash slot): remembers the request id of a final release
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller believes it has
-- ARGV[3]  request id (unique per release call, reused by a retry of the same call)
-- ARGV[4]  hand-off window in milliseconds (0: none)
-- ARGV[5]  how many of the channel's subscribers are the caller's own idle connection (0 or 1)
-- Reply    {code, hold_count}
--   1 RELEASED  hold_count is what remains; 0 means the key was deleted and waiters woken
--  -1 LOST      the caller's hold is gone (lease expired, force-released); nothing changed
-- A retry of a release that already ran answers RELEASED again and changes nothing: the
-- receipt of a final release is kept for 30 s (RECEIPT_MS), far longer than redis-py retries.
-- The unlock message is "0", as Redisson sends it.
-- Hand-off: when the unlock message reached another waiter, the key is kept for the window as a
-- reservation (field "redlease:handoff" = releasing owner) that any owner but the releasing one
-- may take, so a woken waiter is not beaten by the holder coming straight back.
local expected = tonumber(ARGV[2])
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
if count == expected and count > 0 then
  if count > 1 then
    redis.call('hincrby', KEYS[1], ARGV[1], -1)
    return {1, count - 1}
  end
  redis.call('del', KEYS[1])
  local woken = redis.call('publish', KEYS[2], '0') - tonumber(ARGV[5])
  local window = tonumber(ARGV[4])
  if woken > 0 and window > 0 then
    redis.call('hset', KEYS[1], 'redlease:handoff', ARGV[1])
    redis.call('pexpire', KEYS[1], window)
  end
  redis.call('set', KEYS[3], ARGV[3], 'px', 30000)
  return {1, 0}
end
if count > 0 and count == expected - 1 then
  return {1, count}
end
if count == 0 and expected == 1 and redis.call('get', KEYS[3]) == ARGV[3] then
  return {1, 0}
end
return {-1, count}
