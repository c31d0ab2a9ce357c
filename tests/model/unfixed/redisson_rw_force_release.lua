-- Free one side of a read-write lock kept in Redisson's layout, whoever holds it.
-- KEYS[1]  the lock: a hash {"mode" -> "read" or "write", reader field -> read hold count,
--          "<field>:write" -> write hold count}
-- KEYS[2]  the lock's channel "redisson_rwlock:<tagged name>"
-- KEYS[3]  tokens: hash {field -> fencing token of its first hold} (redlease's own key)
-- ARGV[1]  side: "read" or "write"
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- Reply    1 when that side was held (the lock is deleted and "1" published, which wakes
--          every waiter), else 0
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
if redis.call('hget', KEYS[1], 'mode') ~= ARGV[1] then
  return 0
end
redis.call('del', KEYS[1], KEYS[3])
redis.pcall(ARGV[2], KEYS[2], '1')
return 1
