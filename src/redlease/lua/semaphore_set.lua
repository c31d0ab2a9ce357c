-- Make a semaphore have a number of permits in all, held ones included (redlease's
-- set_permits; Redisson's lease semaphore setPermits does the same with its own count).
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  total permits (see semaphore_try_set.lua)
-- KEYS[3]  semaphore channel
-- ARGV[1]  permits in all (>= 0)
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  the largest count allowed (2**53 - 1); the free count stays within -ARGV[3]..ARGV[3]
-- Reply    {available, total_before, code}: total_before is -1 when it was unknown; code 1:
--          done; -2: the free count would pass -ARGV[3], and nothing changed
-- The free count moves by the difference between the new total and the old one, so permits
-- held now stay counted (fewer in all than are held leaves the free count below zero until
-- they come back). With the total unknown (a semaphore set by a Redisson client, or never
-- set) the free count becomes ARGV[1], as if none were held. Running it again changes nothing:
-- a retried request counts once. A count that rose above zero is published (as a release does).
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[3], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
local existed = redis.call('exists', KEYS[1]) == 1
local available = tonumber(redis.call('get', KEYS[1]) or '0')
local total = -1
if existed then
  total = tonumber(redis.call('get', KEYS[2]) or '-1')
  if total >= 0 and total < available then
    total = available -- the count went past the total by another client's doing
  end
end
local permits = tonumber(ARGV[1])
local new = permits
if total >= 0 then
  new = available + permits - total
end
if new < -tonumber(ARGV[3]) then
  return {available, total, -2}
end
if not existed then
  redis.call('set', KEYS[1], new)
elseif new ~= available then
  redis.call('incrby', KEYS[1], new - available)
end
redis.call('set', KEYS[2], permits)
if new > available and new > 0 then
  redis.pcall(ARGV[2], KEYS[3], new)
end
return {new, total, 1}
