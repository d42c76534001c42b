-- ARGV: visible until, then (entry ref, token, uid) per message.
local count = 0
for i = 2, #ARGV, 3 do
  local m = held(ARGV[i], ARGV[i + 1], ARGV[i + 2])
  if m ~= nil then
    local _, v = stream_of(m.lane, m.grp)
    redis.call('ZADD', v, 'XX', ARGV[1], m.eid)
    count = count + 1
  end
end
return count
