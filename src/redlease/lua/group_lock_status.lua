-- What the server says about a group lock's set of values (see group_lock_acquire.lua).
-- KEYS[1]  the group's hash
-- ARGV[1]  set id
-- ARGV[2..] the values' field names
-- Reply    {ttl_ms, 0, owner, count, ..., 'redlease:fence', token}: ttl_ms the longest time
--          left on a live hold of one of the values (-2: none is held), then each owner that
--          holds one of them live with its hold count on the set (the count of its hold on
--          exactly these values, else the highest count of its values), then the fencing
--          token of that hold when one owner holds them all (the layout of lock_status.lua)
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local longest, owners, order = -2, {}, {}
for i = 2, #ARGV do
  local holder = redis.call('hget', KEYS[1], ARGV[i])
  if holder then
    local prefix = ARGV[i] .. ':' .. holder
    local ends = tonumber(redis.call('hget', KEYS[1], prefix .. ':expire_time') or '0')
    if ends >= now_ms then
      longest = math.max(longest, ends - now_ms)
      local count = tonumber(redis.call('hget', KEYS[1], prefix .. ':lock_count') or '1')
      if not owners[holder] then
        owners[holder] = {count = 0, values = 0}
        table.insert(order, holder)
      end
      owners[holder].count = math.max(owners[holder].count, count)
      owners[holder].values = owners[holder].values + 1
    end
  end
end
local reply = {longest, 0}
local token
for _, holder in ipairs(order) do
  local count = owners[holder].count
  local found = redis.call('hmget', KEYS[1], 'redlease:hold:' .. holder .. ':' .. ARGV[1],
    'redlease:fence:' .. holder .. ':' .. ARGV[1])
  if found[1] and found[2] and owners[holder].values == #ARGV - 1 then
    token, count = found[2], tonumber(string.match(found[1], '^(%d+) '))
  end
  table.insert(reply, holder)
  table.insert(reply, count)
end
if token then
  table.insert(reply, 'redlease:fence')
  table.insert(reply, token)
end
return reply
