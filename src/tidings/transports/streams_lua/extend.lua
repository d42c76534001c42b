-- ARGV: visible until, then (entry ref, token) per message.
local count = 0
for i = 2, #ARGV, 2 do
  local m = held(ARGV[i], ARGV[i + 1])
  if m ~= nil then
    redis.call('ZADD', VL[m.lane + 1], 'XX', ARGV[1], m.eid)
    count = count + 1
  end
end
return count
