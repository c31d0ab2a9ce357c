
local any = 0
for i = 1, #KEYS do
  if redis.call('pexpire', KEYS[i], ARGV[1]) == 1 then any = 1 end
end
return any
