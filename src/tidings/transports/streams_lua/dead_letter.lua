-- ARGV: now, then (entry ref, token, uid, reason) per message. A dead letter keeps its
-- lane and group, which a redrive puts it back in.
local now = ARGV[1]
local count = 0
for i = 2, #ARGV, 4 do
  local ref, token, reason = ARGV[i], ARGV[i + 1], ARGV[i + 3]
  local m = held(ref, token, ARGV[i + 2])
  if m ~= nil then
    redis.call('XADD', DL, '*', 'id', m.id, 'body', m.body, 'reason', reason,
               'rc', tostring(tonumber(m.rc) + m.deliveries), 'dead_at', now, 'enq', m.enq,
               'lane', tostring(m.lane), 'grp', m.grp)
    drop(m.lane, m.eid, m.grp)
    forget(m)
    count = count + 1
  end
end
return count
