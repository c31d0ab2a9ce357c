-- Release one hold of a reentrant lock; the last one frees it and wakes the waiters.
-- KEYS[1]  lock key (hash {owner field -> hold count})
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}"
-- KEYS[3]  release receipts key (same hash slot): the request ids of recent final releases,
--          written when a release frees the lock
-- KEYS[4]  the line (zset, see lock_acquire.lua)
-- KEYS[5]  outsiders' turn (hash, see lock_acquire.lua)
-- KEYS[6]  fencing counter (see lock_acquire.lua)
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller believes it has
-- ARGV[3]  request id (unique per release call, reused by a retry of the same call; at most
--          33 bytes, no spaces)
-- ARGV[4]  hand-over window in milliseconds (0: no hand-over, Redisson's free-for-all)
-- ARGV[5]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded pub/sub, on
--          a cluster of Redis/Valkey >= 7); anything else is refused before any change
-- ARGV[6]  prefix of the waiters' own channels (same hash slot as the lock): a waiter's
--          client listens on the prefix followed by the client id part of its owner field
-- ARGV[7]  1 when the owner's last re-entrant acquire had an unknown outcome (its reply was
--          lost), so the count may be one above what it believes: that hold goes too; else 0
-- ARGV[8]  how long an outsiders' turn lasts, ms (0: never; see below)
-- ARGV[9]  the fencing token of the caller's hold (0: the caller does not know it, as a
--          Redlock owner on each master): a release acts only on the hold with that token,
--          never on another hold of the same owner field (a stale copy after a failover)
-- ARGV[10] 1: a quiet release (a spin lock's, as Redisson's RSpinLock unlocks): nothing is
--          published, so it needs no permission to publish (and ARGV[4] must be 0: no
--          hand-over); waiters of the same name re-check within their bound (a wake-up is only
--          a hint). 0 or absent: the wake-up is published
-- Reply    {code, hold_count}
--   1 RELEASED  hold_count is what remains (the caller's count less one); 0 means the lock
--               was freed and waiters woken
--  -1 LOST      the caller's hold is gone (lease expired, force-released, or the hold there
--               has another token); nothing changed
-- Receipts: a retry of a final release that already ran answers RELEASED again and changes
-- nothing. Request ids are unique across processes and hosts, so only the release that made
-- a receipt is answered by it. The request ids of the last 16 final releases (at least:
-- as many whole ids as RECEIPT_BYTES holds), the oldest first, travel
-- with the lock from holder to holder (field "redlease:released" of the lock hash, which a
-- hand-over copies); a release that frees the lock appends them to those still in the
-- receipts key KEYS[3] (a free-lock acquire or a Redisson holder in between starts a hash
-- without them), kept for 30 s (RECEIPT_MS). So a retry is recognised for 30 s, or until 16
-- more final releases ran, whichever ends first, whatever path the holds in between took;
-- only a hold handed over that then ends by expiry (its holder died) takes the receipts it
-- carries with it. The key is appended to (APPEND, PEXPIRE: not read on this path) and cut
-- back to the newest RECEIPT_BYTES only when it grows past twice that; lock_leave.lua,
-- lock_release_keep.lua and lock_force_release.lua write it the same way.
-- Hand-over: when a waiter is in line, the freed lock goes to the first one (by arrival), and
-- only its client is woken, on its client's own channel (ARGV[6]), so no other process wakes:
-- it is handed the lock outright: it holds it, with a fresh fencing token (above the counter
-- and the releaser's token, not below the server clock in microseconds: see lock_acquire.lua)
-- and the lease of its place (the window, which its watchdog lengthens, or the waiter's own;
-- field "redlease:lease" is then the lease it will have: see lock_acquire.lua), and the
-- message is
-- "<owner field> <token> <lease ms> <wait id>", so it has the lock without another round
-- trip; only the acquire call with that wait id may take it as a grant (a late message is
-- a mere wake-up for a later call). A place whose lease is longer than the window is first
-- checked live (its client listens), and dropped if not; one handed the window that turns
-- out dead frees when the window runs out.
-- Otherwise "0" is published, as Redisson does.
-- Outsiders' turn: Redisson's waiters are never in the line and wake only on "0", so a line
-- that keeps handing the lock on would starve them. A release of a hold that came by a
-- hand-over (field "redlease:handed": the arrival time of the place it came to, or of the
-- last such check) therefore checks, at most every OUTSIDERS_CHECK_US of arrivals, whether
-- clients outside the line listen on the unlock channel (PUBSUB NUMSUB above the redlease
-- clients listening: those in line, the releaser's, and any other with a hand-over channel of
-- this lock, by PUBSUB CHANNELS); if so it frees the lock and publishes "0" instead of
-- handing it on, and for ARGV[8] ms (field "redlease:outsiders" of KEYS[5]) redlease callers
-- leave a free lock alone (lock_acquire.lua answers -2, "another's turn"), so an outsider
-- woken by the "0" takes it.
-- Hot path (a hand-over): hmget, zpopmin, del, time, set (the counter), hset, pexpire,
-- publish. A release that frees the lock: hmget, del, zpopmin, publish, append, pexpire.
if ARGV[5] ~= 'publish' and ARGV[5] ~= 'spublish' then
  return redis.error_reply('ERR redlease: ARGV[5] must be publish or spublish')
end
local RECEIPT_BYTES = 16 * 34 -- the last 16 receipts at least
local OUTSIDERS_CHECK_US = 100000
local expected = tonumber(ARGV[2])
local fields = redis.call('hmget', KEYS[1], ARGV[1], 'redlease:handed', 'redlease:fence',
  'redlease:released')
local count = tonumber(fields[1] or '0')
local mine = tonumber(ARGV[9] or '0')
if count > 0 and mine ~= 0 and tonumber(fields[3] or '0') ~= mine then
  count = 0 -- another hold of the same owner field: not the caller's
end
if expected > 0 and count >= expected and count <= expected + tonumber(ARGV[7]) then
  if expected > 1 then
    redis.call('hset', KEYS[1], ARGV[1], expected - 1)
    return {1, expected - 1}
  end
  -- a final release publishes: a user the server does not let publish (on the unlock
  -- channel, or on the waiters' channels when some wait) is refused before any change
  -- (Redis >= 7, Valkey; Redis 6.2 has no redis.acl_check_cmd)
  local window = tonumber(ARGV[4])
  local quiet = ARGV[10] == '1' and window == 0
  if not quiet and redis.acl_check_cmd and not (redis.acl_check_cmd(ARGV[5], KEYS[2], '0')
      and (window == 0 or redis.acl_check_cmd(ARGV[5], ARGV[6], '0'))) then
    return redis.error_reply("NOPERM this user has no permissions to run the '" .. ARGV[5] .. "' command")
  end
  -- (on Redis 6.2 the wake-up below is sent by pcall: a denied one leaves the release done and
  -- the waiters to re-check on their own, within 5 s, never a lock deleted and an error told)
  -- those that came with the lock, then this request's id (the newest last)
  local receipts = ARGV[3]
  if fields[4] then
    receipts = fields[4] .. ' ' .. receipts
  end
  -- the newest of a list, cut to whole ids within RECEIPT_BYTES, which holds at least the
  -- last 16 (an id is at most 33 bytes and a space)
  local function newest(list)
    if #list > RECEIPT_BYTES then
      list = string.match(string.sub(list, -RECEIPT_BYTES - 1), '^%S* (.*)$') or ARGV[3]
    end
    return list
  end
  local fence = tonumber(fields[3] or '0')
  redis.call('del', KEYS[1])
  local function client_of(place)
    return string.match(place, '^(%S*):%d+ ') or ''
  end
  local function live(channel) -- a client listens on it
    local reply
    if ARGV[5] == 'spublish' then
      reply = redis.call('pubsub', 'shardnumsub', channel)
    else
      reply = redis.call('pubsub', 'numsub', channel)
    end
    return tonumber(reply[2]) > 0
  end
  local function outsiders_listen()
    local reply
    if ARGV[5] == 'spublish' then
      reply = redis.call('pubsub', 'shardnumsub', KEYS[2])
    else
      reply = redis.call('pubsub', 'numsub', KEYS[2])
    end
    local listening = tonumber(reply[2])
    local clients, known = {}, 0
    local function add(client)
      if not clients[client] then
        clients[client] = true
        known = known + 1
      end
    end
    add(string.match(ARGV[1], '^(.*):') or ARGV[1])
    for _, place in ipairs(redis.call('zrange', KEYS[4], 0, 63)) do
      add(client_of(place))
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
  local turn_ms = tonumber(ARGV[8] or '0')
  local checked = tonumber(fields[2] or '0') -- arrival time of the last outsiders' check
  for _ = 1, (window > 0 and 16 or 0) do -- bounded: dead places are dropped as they are met
    local popped = redis.call('zpopmin', KEYS[4])
    local head, arrival = popped[1], tonumber(popped[2])
    if not head then
      break
    end
    local owner, wait, lease = string.match(head, '^(%S+) (%S+) (%S+)$')
    if fields[2] and turn_ms > 0 and arrival - checked >= OUTSIDERS_CHECK_US then
      checked = arrival
      if outsiders_listen() then
        redis.call('zadd', KEYS[4], arrival, head) -- its place is kept
        local now = redis.call('time')
        local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
        redis.call('hset', KEYS[5], 'redlease:outsiders', now_ms + turn_ms)
        redis.call('pexpire', KEYS[5], turn_ms)
        break -- the outsiders' turn: freed, and "0" published below
      end
    end
    local bound = tonumber(string.match(lease or '', '^w?(%d+)$') or '0') -- the wait bound
    lease = string.sub(lease or '', 1, 1) == 'w' and window or bound
    local channel = ARGV[6] .. client_of(head)
    -- (a place of the releasing owner itself is left over from a wait whose end was never
    -- heard by the server: dropped, never handed back to its own releaser)
    if owner and owner ~= ARGV[1] and lease > 0 and (lease <= window or live(channel)) then
      local now = redis.call('time')
      local token = math.max(fence + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
      local last = tonumber(redis.call('set', KEYS[6], token, 'get') or '0')
      if last >= token then -- the counter ran ahead of the clock: go on from it
        token = last + 1
        redis.call('set', KEYS[6], token)
      end
      redis.call('hset', KEYS[1], owner, 1, 'redlease:fence', token, 'redlease:wait', wait,
        'redlease:lease', bound, 'redlease:handed', checked, 'redlease:released',
        newest(receipts))
      redis.call('pexpire', KEYS[1], lease)
      redis.pcall(ARGV[5], channel, owner .. string.format(' %d %d ', token, lease) .. wait)
      return {1, 0}
    end
  end
  if not quiet then
    redis.pcall(ARGV[5], KEYS[2], '0')
  end
  -- after the older receipts, from before a free-lock acquire
  if redis.call('append', KEYS[3], ' ' .. receipts) > 2 * RECEIPT_BYTES then
    redis.call('set', KEYS[3], newest(redis.call('get', KEYS[3])), 'px', 30000)
  else
    redis.call('pexpire', KEYS[3], 30000)
  end
  return {1, 0}
end
if count > 0 and count == expected - 1 then
  return {1, count}
end
if count == 0 and expected == 1 then
  for _, key in ipairs({KEYS[1], KEYS[3]}) do
    local found
    if key == KEYS[1] then
      found = fields[4]
    else
      found = redis.call('get', KEYS[3])
    end
    if found and string.find(' ' .. found .. ' ', ' ' .. ARGV[3] .. ' ', 1, true) then
      return {1, 0}
    end
  end
end
return {-1, count}
