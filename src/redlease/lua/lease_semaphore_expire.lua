-- Set an expiry on a lease semaphore's keys (Redisson RPermitExpirableSemaphore expire, an
-- RExpirable on the semaphore key and its leases).
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  leases (zset, see lease_semaphore_acquire.lua)
-- ARGV[1]  time to live in milliseconds
-- Reply    1 when at least one key got the expiry, 0 when neither exists
-- A permit leased later on a semaphore that expires gets its leases the same expiry
-- (lease_semaphore_acquire.lua), so the two keys go together.
local set = 0
if redis.call('pexpire', KEYS[1], ARGV[1]) == 1 then
  set = 1
end
if redis.call('pexpire', KEYS[2], ARGV[1]) == 1 then
  set = 1
end
return set
