-- ARGV: now, then (entry id, token, reason) per message.
local now = ARGV[1]
local count = 0
for i = 2, #ARGV, 3 do
  local eid, token, reason = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local m = held(eid, token)
  if m ~= nil then
    redis.call('XADD', DL, '*', 'id', m.id, 'body', m.body, 'reason', reason,
               'rc', tostring(tonumber(m.rc) + m.deliveries), 'dead_at', now, 'enq', m.enq)
    drop(eid)
    forget(m)
    count = count + 1
  end
end
return count
