-- Free one side of a read-write lock kept in Redisson's layout, whoever holds it.
-- KEYS[1]  the lock: a hash {"mode" -> "read" or "write", reader field -> read hold count,
--          "<field>:write" -> write hold count}
-- KEYS[2]  the lock's channel "redisson_rwlock:<tagged name>"
-- KEYS[3]  tokens: hash {field -> fencing token of its first hold} (redlease's own key)
-- ARGV[1]  side: "read" or "write"
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  prefix of the holders' clients' own channels for this lock (redlease's, in the
--          lock's slot; no key of Redisson's layout changes)
-- Reply    1 when that side was held (the lock is deleted and "1" published, which wakes
--          every waiter), else 0
-- Each redlease holder of the lock (either side: the whole lock goes) is told at once:
-- "lost <owner field> <token>" on its client's own channel, as lock_force_release.lua tells a
-- lock's holders (a write hold's token is that of field "<owner field>:write").
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
if redis.call('hget', KEYS[1], 'mode') ~= ARGV[1] then
  return 0
end
local told = {} -- {owner field, token} of each hold dropped
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
  if fields[i] ~= 'mode' then
    local token = redis.call('hget', KEYS[3], fields[i])
    if token then
      told[#told + 1] = {string.match(fields[i], '^(.*):write$') or fields[i], token}
    end
  end
end
redis.call('del', KEYS[1], KEYS[3])
redis.pcall(ARGV[2], KEYS[2], '1')
for _, hold in ipairs(told) do
  local client = string.match(hold[1], '^(%x+%-%x+%-%x+%-%x+%-%x+):%d+$')
  if client then
    redis.pcall(ARGV[2], ARGV[3] .. client, 'lost ' .. hold[1] .. ' ' .. hold[2])
  end
end
return 1
