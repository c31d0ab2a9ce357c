-- Drop every hold on one side of a read-write lock, whoever holds them, and wake waiters.
-- KEYS[1]  writer: hash {writer, count, deadline, token} (see rw_write_acquire.lua)
-- KEYS[2]  reader hold counts: hash {owner field -> read hold count}
-- KEYS[3]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[4]  reader tokens: hash {owner field -> fencing token}
-- KEYS[5]  the lock's channel
-- ARGV[1]  side: "read" or "write"
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  prefix of the holders' clients' own channels for this lock (same hash slot): a
--          holder's client listens on the prefix followed by the client id part of its
--          owner field
-- Reply    1 when a live hold was dropped, else 0; "1" is published then (everyone re-checks)
-- Each live hold dropped is told at once: "lost <owner field> <token>" on its client's own
-- channel (as lock_force_release.lua tells a lock's holders; sent by pcall, a hint: a client
-- acts only for its hold with that token, and its watchdog finds the hold gone otherwise).
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
end
-- a user the server does not let publish is refused before any change (Redis >= 7, Valkey;
-- Redis 6.2 cannot check: there the wake-up, a hint sent by pcall, is skipped if denied)
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[5], '0') then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local after = '(' .. now
local held
local told = {} -- {owner field, token} of each live hold dropped
if ARGV[1] == 'write' then
  local w = redis.call('hmget', KEYS[1], 'writer', 'deadline', 'token')
  held = tonumber(w[2] or '0') > now
  if held and w[1] and w[3] then
    told[1] = {w[1], w[3]}
  end
  redis.call('del', KEYS[1])
else
  local live = redis.call('zrangebyscore', KEYS[3], after, '+inf')
  held = #live > 0
  for _, owner in ipairs(live) do
    local token = redis.call('hget', KEYS[4], owner)
    if token then
      told[#told + 1] = {owner, token}
    end
  end
  redis.call('del', KEYS[2], KEYS[3], KEYS[4])
end
if held then
  redis.pcall(ARGV[2], KEYS[5], '1')
end
for _, hold in ipairs(told) do
  local client = string.match(hold[1], '^(%x+%-%x+%-%x+%-%x+%-%x+):%d+$')
  if client then
    redis.pcall(ARGV[2], ARGV[3] .. client, 'lost ' .. hold[1] .. ' ' .. hold[2])
  end
end
if held then
  return 1
end
return 0
