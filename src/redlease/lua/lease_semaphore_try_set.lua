-- Set a lease semaphore's permits only if they were never set (Redisson
-- RPermitExpirableSemaphore trySetPermits).
-- KEYS[1]  semaphore key: a string, the permits available now (Redisson's layout)
-- KEYS[2]  leases: zset {permit id (16 bytes) -> when its lease ends, ms (server clock)}
-- KEYS[3]  semaphore channel "redisson_sc:{<name>}"
-- ARGV[1]  permits
-- Reply    1 when set (the new count is published, waking waiters), 0 when already set
if redis.call('exists', KEYS[1]) == 1 or redis.call('zcard', KEYS[2]) > 0 then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[3], ARGV[1])
return 1
