-- ARGV: now, failed (1/0), then (entry ref, token, uid, visible at) per message. The
-- message stays in its lane and group.
local now, failed = tonumber(ARGV[1]), ARGV[2] == '1'
local count = 0
for i = 3, #ARGV, 4 do
  local ref, token, at = ARGV[i], ARGV[i + 1], ARGV[i + 3]
  local m = held(ref, token, ARGV[i + 2])
  if m ~= nil then
    if failed then redis.call('HINCRBY', F, m.uid, 1) end
    local rc = tostring(tonumber(m.rc) + m.deliveries)
    drop(m.lane, m.eid, m.grp)
    if tonumber(at) <= now then
      append(m, m.uid, rc, true)
    else
      park(m, m.uid, rc, at)
    end
    count = count + 1
  end
end
return count
