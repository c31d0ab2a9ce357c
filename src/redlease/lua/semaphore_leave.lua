-- A waiter gives up (timeout, cancellation, error): drop its registration as a waiter.
-- Shared by the semaphore, the lease semaphore and the count-down latch.
-- KEYS[1]  waiters (zset {owner field -> when its registration lapses, ms})
-- ARGV[1]  owner field of the waiter
-- Reply    1 when it was registered, else 0
return redis.call('zrem', KEYS[1], ARGV[1])
