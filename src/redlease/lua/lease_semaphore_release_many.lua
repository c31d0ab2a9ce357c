-- Give back several permits by id at once (Redisson RPermitExpirableSemaphore release(List)):
-- all or none, or, to give back an abandoned acquire, whichever are held.
-- KEYS[1]  semaphore key (permits available now)
-- KEYS[2]  leases (zset, see lease_semaphore_acquire.lua)
-- KEYS[3]  semaphore channel; the number given back is published, as Redisson does
-- KEYS[4..n+3] the receipt of each permit's release (same hash slot): present once it ran
-- ARGV[1]  how long the receipts are kept, ms
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  '1': all or none (a release); '0': whichever are held (giving back an acquire)
-- ARGV[4..n+3] permit ids (16 bytes each, no two alike), in the order of their receipts
-- Reply    {code, given_back, available, state_1, ..., state_n}
--   code 1 RELEASED  done; given_back counts the permits given back by this call
--        0 REFUSED   (all or none) some permit is not held: nothing changed
--   state  1 held (given back now; left held when REFUSED)
--          2 given back before by this same request (its receipt): a retry changes nothing
--          0 no such permit: never granted, already released, or expired and given back
--         -1 its lease had run out (not yet given back): with '0' it is given back now
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[3], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local states = {}
local refused = false
for i = 1, #ARGV - 3 do
  if redis.call('exists', KEYS[i + 3]) == 1 then
    states[i] = 2
  else
    local score = redis.call('zscore', KEYS[2], ARGV[i + 3])
    if not score then
      states[i] = 0
      refused = true
    elseif tonumber(score) <= now_ms then
      states[i] = -1
      refused = true
    else
      states[i] = 1
    end
  end
end
local reply = {1, 0, 0}
if refused and ARGV[3] == '1' then
  reply[1] = 0
else
  for i = 1, #states do
    if states[i] == 1 or states[i] == -1 then
      redis.call('zrem', KEYS[2], ARGV[i + 3])
      reply[2] = reply[2] + 1
    end
    if states[i] == 1 then
      redis.call('set', KEYS[i + 3], 1, 'px', ARGV[1])
    end
  end
end
if reply[2] > 0 then
  reply[3] = redis.call('incrby', KEYS[1], reply[2])
  redis.pcall(ARGV[2], KEYS[3], reply[2])
else
  reply[3] = tonumber(redis.call('get', KEYS[1]) or '0')
end
for i = 1, #states do
  reply[i + 3] = states[i]
end
return reply
