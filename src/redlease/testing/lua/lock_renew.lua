
-- The watchdog's renewal of one hold: a lease again, if the holder is still there.
-- KEYS[1] lock hash; ARGV[1] lease ms; ARGV[2] holder field. Reply: 1 renewed, 0 gone
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return 0
end
return redis.call('pexpire', KEYS[1], ARGV[1])
