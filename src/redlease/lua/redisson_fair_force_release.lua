-- Delete a fair lock in Redisson's RedissonFairLock layout whoever holds it, and wake the
-- first waiter in line (Redisson's forceUnlock).
-- KEYS[1]  lock key
-- KEYS[2]  Redisson's line (list of owner fields)
-- KEYS[3]  Redisson's places (zset {owner field -> when its place lapses, epoch ms})
-- KEYS[4]  Redisson's unlock channel; a waiter listens on it followed by ":<owner field>"
-- ARGV[1]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[2]  prefix of the clients' own channels for this lock (redlease's, as for the plain
--          lock: see lock_force_release.lua; no key of Redisson's layout changes)
-- Reply    1 when a lock was deleted, 0 when it was free
-- Each redlease holder is told at once: "lost <owner field> <token>" on its client's own
-- channel, as lock_force_release.lua tells it (Redisson's own clients do not listen there).
-- A key that is not a lock (another type, or a hash with a field that is neither an owner
-- "<uuid>:<digits>" with a count nor "redlease:*") is never deleted: WRONGTYPE error. Lapsed
-- places leave the line from its head first (server clock); the wake-up is sent by pcall.
if ARGV[1] ~= 'publish' and ARGV[1] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[1] must be publish or spublish')
end
local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' or redis.call('hlen', KEYS[1]) > 64 then
  return redis.error_reply('WRONGTYPE redlease: key ' .. KEYS[1] .. ' holds a ' .. kind .. ', not a lock')
end
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 9) ~= 'redlease:'
      and not (string.match(fields[i], '^%x+%-%x+%-%x+%-%x+%-%x+:%d+$')
        and string.match(fields[i + 1], '^%d+$')) then
    return redis.error_reply('WRONGTYPE redlease: key ' .. KEYS[1] .. ' holds a hash, not a lock')
  end
end
local token = redis.call('hget', KEYS[1], 'redlease:fence')
redis.call('del', KEYS[1])
if token then
  for i = 1, #fields, 2 do
    local client = string.match(fields[i], '^(%x+%-%x+%-%x+%-%x+%-%x+):%d+$')
    if client then
      redis.pcall(ARGV[1], ARGV[2] .. client, 'lost ' .. fields[i] .. ' ' .. token)
    end
  end
end
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
for _ = 1, 100 do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then
    break
  end
  local lapses = redis.call('zscore', KEYS[3], head)
  if lapses and tonumber(lapses) > now_ms then
    redis.pcall(ARGV[1], KEYS[4] .. ':' .. head, '0')
    break
  end
  redis.call('zrem', KEYS[3], head)
  redis.call('lpop', KEYS[2])
end
return 1
