-- Read a read-write lock's state in one atomic step (live holds only).
-- KEYS[1]  writer: hash {writer, count, deadline, token} (see rw_write_acquire.lua)
-- KEYS[2]  reader hold counts: hash {owner field -> read hold count}
-- KEYS[3]  reader leases: zset {owner field -> lease end, ms (server clock)}
-- KEYS[4]  reader tokens: hash {owner field -> fencing token}
-- KEYS[5]  writers' places: zset {owner field -> when its place lapses, ms}
-- ARGV[1]  owner field of the caller
-- Reply    {writer, write_count, write_ms, write_token, waiting, read_token, read_ms,
--           reader1, count1, reader2, count2, ...}
--          writer is "" and write_ms -2 when nobody writes; waiting counts live places in
--          line; read_token is the caller's read token (0: none); read_ms is the longest
--          reader lease left (-2: no reader)
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local after = '(' .. now
local out = {'', 0, -2, 0, redis.call('zcount', KEYS[5], after, '+inf'), 0, -2}
local writer = redis.call('hget', KEYS[1], 'writer')
local ends = tonumber(redis.call('hget', KEYS[1], 'deadline') or '0')
if writer and ends > now then
  out[1] = writer
  out[2] = tonumber(redis.call('hget', KEYS[1], 'count'))
  out[3] = ends - now
  out[4] = tonumber(redis.call('hget', KEYS[1], 'token'))
end
if tonumber(redis.call('zscore', KEYS[3], ARGV[1]) or '0') > now then
  out[6] = tonumber(redis.call('hget', KEYS[4], ARGV[1]) or '0')
end
local readers = redis.call('zrangebyscore', KEYS[3], after, '+inf', 'WITHSCORES')
for i = 1, #readers, 2 do
  out[7] = tonumber(readers[i + 1]) - now
  table.insert(out, readers[i])
  table.insert(out, tonumber(redis.call('hget', KEYS[2], readers[i]) or '0'))
end
return out
