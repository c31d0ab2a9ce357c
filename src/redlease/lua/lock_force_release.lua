-- Delete a lock whoever holds it, and wake its waiters.
-- KEYS[1]  lock key
-- KEYS[2]  unlock channel
-- KEYS[3]  release receipts key (see lock_release.lua): the receipts the lock carried (of
--          releases that handed it over) are kept there for 30 s, as a final release keeps
--          them, so a retry of one of those releases is still recognised
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[3]  prefix of the holders' clients' own channels for this lock (same hash slot as the
--          lock, named as lock_release.lua's hand-over channels, with a prefix of their own):
--          a holder's client listens on the prefix followed by the client id part of its
--          owner field
-- Reply    1 when a lock was deleted (held, or kept after its release), 0 when it was free
-- Each holder is told at once: "lost <owner field> <token>" on its client's own channel
-- (the hold's fencing token, field "redlease:fence"; no message for a hold without one, as
-- a Redisson client's, which listens on no such channel). A client acts on it only for its
-- hold of that owner field with that token, so a message that arrives late (about an
-- earlier hold) or twice changes nothing; one that never arrives leaves the watchdog to
-- find the hold gone. Sent by pcall: a hint, never a reason to fail the release.
-- A lock kept after its release (lock_release_keep.lua: field "<uuid>:<digits>:kept", held by
-- no one until the key expires) is deleted as a held lock is, and its waiters woken the same
-- way; no owner holds it, so no "lost" message goes out (its releaser was told RELEASED).
-- A key that is not a lock (another type, or a hash with a field that is neither an owner
-- "<uuid>:<digits>" nor a kept lock's field with a count, nor "redlease:*") is never
-- deleted: WRONGTYPE error. A user the server does not let publish gets a NOPERM error before
-- any change (Redis >= 7, Valkey).
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[2] must be publish or spublish')
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
      and not ((string.match(fields[i], '^%x+%-%x+%-%x+%-%x+%-%x+:%d+$')
          or string.match(fields[i], '^%x+%-%x+%-%x+%-%x+%-%x+:%d+:kept$'))
        and string.match(fields[i + 1], '^%d+$')) then
    return redis.error_reply('WRONGTYPE redlease: key ' .. KEYS[1] .. ' holds a hash, not a lock')
  end
end
if redis.acl_check_cmd and not redis.acl_check_cmd(ARGV[2], KEYS[2], ARGV[1]) then
  return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[2] .. "' command")
end
local carried = redis.call('hget', KEYS[1], 'redlease:released')
if carried then
  -- appended, the newest last, cut back to whole ids within 16 x 34 bytes when the key
  -- grows past twice that, as lock_release.lua keeps them
  if redis.call('append', KEYS[3], ' ' .. carried) > 2 * 16 * 34 then
    local list = redis.call('get', KEYS[3])
    list = string.match(string.sub(list, -16 * 34 - 1), '^%S* (.*)$') or carried
    redis.call('set', KEYS[3], list, 'px', 30000)
  else
    redis.call('pexpire', KEYS[3], 30000)
  end
end
local token = redis.call('hget', KEYS[1], 'redlease:fence')
redis.call('del', KEYS[1])
redis.pcall(ARGV[2], KEYS[2], ARGV[1])
if token then
  for i = 1, #fields, 2 do
    local client = string.match(fields[i], '^(%x+%-%x+%-%x+%-%x+%-%x+):%d+$')
    if client then
      redis.pcall(ARGV[2], ARGV[3] .. client, 'lost ' .. fields[i] .. ' ' .. token)
    end
  end
end
return 1
