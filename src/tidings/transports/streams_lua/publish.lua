-- ARGV: now, then (message id, body, visible at, lane) per message; visible at <= now is
-- ready. One uid counter step for the whole call, one XADD and one HINCRBY a ready
-- message: a relay page's cost on the server is about its entries.
local now = ARGV[1]
local nowf = tonumber(now)
local count = (#ARGV - 1) / 4
local first = redis.call('INCRBY', SEQ, count) - count
local grouped = {}
for n = 0, count - 1 do
  local i = 2 + 4 * n
  local uid = tostring(first + n + 1)
  local lane = lane_of(ARGV[i + 3])
  redis.call('HINCRBY', I, ARGV[i], 1)
  if tonumber(ARGV[i + 2]) <= nowf then
    -- The group is made with the lane's stream (from its first entry: id 0).
    if not grouped[lane] then
      ensure_group(lane)
      grouped[lane] = true
    end
    redis.call('XADD', SL[lane + 1], '*', 'id', ARGV[i], 'body', ARGV[i + 1], 'enq', now,
               'uid', uid, 'rc', '0')
  else
    park({id = ARGV[i], body = ARGV[i + 1], enq = now, lane = lane}, uid, '0', ARGV[i + 2])
  end
end
return count
