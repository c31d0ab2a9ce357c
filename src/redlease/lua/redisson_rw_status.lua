-- Read a read-write lock kept in Redisson's RReadWriteLock layout, in one atomic step.
-- KEYS[1]  the lock: a hash {"mode" -> "read" or "write", reader field -> read hold count,
--          "<field>:write" -> write hold count}; its TTL is the longest lease of any hold
-- KEYS[2]  tokens: hash {field -> fencing token of its first hold} (redlease's own key)
-- Reply    {ttl_ms, field1, count1, field2, count2, ...}: the lock's TTL (-2: free) and its
--          fields ("mode" among them), then "tokens" and that hash's field/token pairs
local out = {redis.call('pttl', KEYS[1])}
for _, v in ipairs(redis.call('hgetall', KEYS[1])) do
  table.insert(out, v)
end
table.insert(out, 'tokens')
for _, v in ipairs(redis.call('hgetall', KEYS[2])) do
  table.insert(out, v)
end
return out
