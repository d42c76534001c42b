-- ARGV: now, then (message id, body, visible at) per message; visible at <= now is ready.
ensure_group()
local now = ARGV[1]
local nowf = tonumber(now)
for i = 2, #ARGV, 3 do
  local m = {id = ARGV[i], body = ARGV[i + 1], enq = now}
  local at = ARGV[i + 2]
  local uid = tostring(redis.call('INCR', SEQ))
  redis.call('HINCRBY', I, m.id, 1)
  redis.call('ZADD', A, now, uid)
  if tonumber(at) <= nowf then
    append(m, uid, '0')
  else
    park(m, uid, '0', at)
  end
end
return (#ARGV - 1) / 3
