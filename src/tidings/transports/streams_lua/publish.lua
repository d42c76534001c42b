-- ARGV: now, then (message id, body, visible at) per message; visible at <= now is ready.
-- One uid counter step for the whole call, one XADD and one HINCRBY a ready message:
-- a relay page's cost on the server is about its entries.
ensure_group()
local now = ARGV[1]
local nowf = tonumber(now)
local count = (#ARGV - 1) / 3
local first = redis.call('INCRBY', SEQ, count) - count
for n = 0, count - 1 do
  local i = 2 + 3 * n
  local uid = tostring(first + n + 1)
  redis.call('HINCRBY', I, ARGV[i], 1)
  if tonumber(ARGV[i + 2]) <= nowf then
    redis.call('XADD', S, '*', 'id', ARGV[i], 'body', ARGV[i + 1], 'enq', now, 'uid', uid,
               'rc', '0')
  else
    park({id = ARGV[i], body = ARGV[i + 1], enq = now}, uid, '0', ARGV[i + 2])
  end
end
return count
