-- Release one hold of a reentrant lock; the last one frees it and wakes the waiters.
-- KEYS[1]  lock key (hash {owner field -> hold count})
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- KEYS[3]  release receipt key (same hash slot): remembers the request id of a final release
-- KEYS[4]  wait queue (zset, see lock_acquire.lua)
-- KEYS[5]  queue deadlines (hash, see lock_acquire.lua)
-- KEYS[6]  fencing counter (see lock_acquire.lua)
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller believes it has
-- ARGV[3]  request id (unique per release call, reused by a retry of the same call)
-- ARGV[4]  hand-off window in milliseconds (0: no hand-off, Redisson's free-for-all)
-- ARGV[5]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[6]  prefix of the waiters' own channels (same hash slot as the lock): a waiter's
--          client listens on the prefix followed by the client id part of its owner field
-- ARGV[7]  1 when the owner's last re-entrant acquire had an unknown outcome (its reply was
--          lost), so the count may be one above what it believes: that hold goes too; else 0
-- ARGV[8]  how long an outsiders' turn lasts, ms (0: never; see below)
-- Reply    {code, hold_count}
--   1 RELEASED  hold_count is what remains (the caller's count less one); 0 means the lock
--               was freed and waiters woken
--  -1 LOST      the caller's hold is gone (lease expired, force-released); nothing changed
-- A retry of a release that already ran answers RELEASED again and changes nothing: the
-- receipt of a final release is kept for 30 s (RECEIPT_MS), far longer than redis-py retries.
-- Hand-off: when a live waiter is in line, the freed lock goes to it, and only that waiter is
-- woken: instead of "0" on the unlock channel, its owner field is published on its client's
-- own channel (ARGV[6]), so no other process wakes:
--  * a waiter that may be handed the lock (see lock_acquire.lua) and last tried within half
--    the window is handed it outright: it holds the lock, with a fencing token and a lease of
--    the window (its watchdog lengthens it), and the message is
--    "<owner field> <token> <lease ms> <wait id>", so it has the lock without another round
--    trip; only the acquire call with that wait id may take it as a grant (a late message
--    is a mere wake-up for a later call). A waiter that died just before is handed it too,
--    and it frees when the window runs out;
--  * any other live waiter gets a reservation for the window (field "redlease:handoff" = its
--    owner field; the message is its owner field), which its next try turns into a hold.
-- Otherwise "0" is published, as Redisson does.
-- Outsiders' turn: Redisson's waiters are never in the line and wake only on "0", so a line
-- that keeps handing the lock on would starve them. A release of a hold that came by a
-- hand-over (field "redlease:handed") therefore frees the lock and publishes "0" instead of
-- handing it on when clients outside the line listen on the unlock channel (PUBSUB NUMSUB
-- above the redlease clients listening: those in line, the releaser's, and any other with a
-- hand-over channel of this lock, by PUBSUB CHANNELS): for ARGV[8] ms (field "redlease:outsiders"
-- of KEYS[5]) redlease callers leave a free lock alone (lock_acquire.lua answers -2, "another's
-- turn"), so an outsider woken by the "0" takes it.
if ARGV[5] ~= 'publish' and ARGV[5] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[5] must be publish or spublish')
end
local expected = tonumber(ARGV[2])
local fields = redis.call('hmget', KEYS[1], ARGV[1], 'redlease:handed')
local count = tonumber(fields[1] or '0')
if expected > 0 and count >= expected and count <= expected + tonumber(ARGV[7]) then
  if expected > 1 then
    redis.call('hset', KEYS[1], ARGV[1], expected - 1)
    return {1, expected - 1}
  end
  -- a final release publishes: a user the server does not let publish (on the unlock
  -- channel, or on the waiters' channels when some wait) is refused before any change
  -- (Redis >= 7, Valkey; Redis 6.2 has no redis.acl_check_cmd)
  local window = tonumber(ARGV[4])
  local line = window > 0 and redis.call('exists', KEYS[4]) == 1
  if redis.acl_check_cmd and not (redis.acl_check_cmd(ARGV[5], KEYS[2], '0')
      and (not line or redis.acl_check_cmd(ARGV[5], ARGV[6], '0'))) then
    return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[5] .. "' command")
  end
  -- (on Redis 6.2 the wake-up below is sent by pcall: a denied one leaves the release done and
  -- the waiters to re-check on their own, within 5 s, never a lock deleted and an error told)
  local handed = fields[2] ~= false -- this hold came by a hand-over
  redis.call('del', KEYS[1])
  if line then
    local now = redis.call('time')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    local turn_ms = tonumber(ARGV[8] or '0')
    local function outsiders_listen()
      local reply
      if ARGV[5] == 'spublish' then
        reply = redis.call('pubsub', 'shardnumsub', KEYS[2])
      else
        reply = redis.call('pubsub', 'numsub', KEYS[2])
      end
      local listening = tonumber(reply[2])
      local clients, known = {}, 0
      local function add(field)
        local client = string.match(field, '^(.*):') or field
        if not clients[client] then
          clients[client] = true
          known = known + 1
        end
      end
      add(ARGV[1])
      for _, field in ipairs(redis.call('zrange', KEYS[4], 0, 63)) do
        add(field)
      end
      if listening <= known then
        return false
      end
      -- a listener not in line: a redlease client between two waits still listens for a
      -- while, and on its own hand-over channel too, so those are counted (only now: the scan
      -- of the server's channels is not for every release)
      local pattern = string.gsub(ARGV[6], '[%*%?%[%]\\]', '\\%0') .. '*'
      local ours
      if ARGV[5] == 'spublish' then
        ours = #redis.call('pubsub', 'shardchannels', pattern)
      else
        ours = #redis.call('pubsub', 'channels', pattern)
      end
      return listening > ours
    end
    for _ = 1, 16 do -- bounded: lapsed places are dropped as they are met
      local head = redis.call('zrange', KEYS[4], 0, 0)[1]
      if not head then
        break
      end
      local place = redis.call('hget', KEYS[5], head) or '0'
      local lapses, seen, wait = string.match(place, '^(%d+):?(%d*):?(.*)$')
      if tonumber(lapses or '0') > now_ms and handed and turn_ms > 0 and outsiders_listen() then
        redis.call('hset', KEYS[5], 'redlease:outsiders', now_ms + turn_ms)
        break -- the outsiders' turn: freed, and "0" published below
      end
      if tonumber(lapses or '0') > now_ms then
        local message = head
        if seen ~= '' and now_ms - tonumber(seen) <= window / 2 then
          local token = math.max(tonumber(redis.call('get', KEYS[6]) or '0') + 1,
            tonumber(now[1]) * 1000000 + tonumber(now[2]))
          redis.call('set', KEYS[6], token)
          redis.call('hset', KEYS[1], head, 1, 'redlease:fence', token, 'redlease:wait', wait,
            'redlease:handed', 1)
          redis.call('zrem', KEYS[4], head)
          redis.call('hdel', KEYS[5], head)
          message = head .. string.format(' %d %d ', token, window) .. wait
        else
          redis.call('hset', KEYS[1], 'redlease:handoff', head)
        end
        redis.call('pexpire', KEYS[1], window)
        redis.pcall(ARGV[5], ARGV[6] .. (string.match(head, '^(.*):') or head), message)
        redis.call('set', KEYS[3], ARGV[3], 'px', 30000)
        return {1, 0}
      end
      redis.call('zrem', KEYS[4], head)
      redis.call('hdel', KEYS[5], head)
    end
  end
  redis.pcall(ARGV[5], KEYS[2], '0')
  redis.call('set', KEYS[3], ARGV[3], 'px', 30000)
  return {1, 0}
end
if count > 0 and count == expected - 1 then
  return {1, count}
end
if count == 0 and expected == 1 and redis.call('get', KEYS[3]) == ARGV[3] then
  return {1, 0}
end
return {-1, count}
