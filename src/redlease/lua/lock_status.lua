-- Read a lock's state in one atomic step.
-- KEYS[1]  lock key
-- Reply    {ttl_ms, field1, count1, field2, count2, ...}; ttl_ms is -2 when the lock is free,
--          -1 when it has no expiry
return {redis.call('pttl', KEYS[1]), unpack(redis.call('hgetall', KEYS[1]))}
