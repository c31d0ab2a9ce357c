
-- The watchdog's renewal: a lease again while the thread holds the lock. Reply: 1 / 0
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return 0
end
return redis.call('pexpire', KEYS[1], ARGV[1])
