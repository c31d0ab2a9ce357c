-- Read a lock's state in one atomic step.
-- KEYS[1]  lock key
-- KEYS[2]  the line (zset of places)
-- Reply    {ttl_ms, in_line, field1, count1, field2, count2, ...}; ttl_ms is -2 when the key
--          does not exist, -1 when it has no expiry; in_line counts the places in line
return {redis.call('pttl', KEYS[1]), redis.call('zcard', KEYS[2]),
  unpack(redis.call('hgetall', KEYS[1]))}
