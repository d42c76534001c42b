-- ARGV: now, failed (1/0), then (entry ref, token, visible at) per message. The message
-- stays in its lane.
local now, failed = tonumber(ARGV[1]), ARGV[2] == '1'
local count = 0
for i = 3, #ARGV, 3 do
  local ref, token, at = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local m = held(ref, token)
  if m ~= nil then
    if failed then redis.call('HINCRBY', F, m.uid, 1) end
    local rc = tostring(tonumber(m.rc) + m.deliveries)
    drop(m.lane, m.eid)
    if tonumber(at) <= now then
      append(m, m.uid, rc, true)
    else
      park(m, m.uid, rc, at)
    end
    count = count + 1
  end
end
return count
