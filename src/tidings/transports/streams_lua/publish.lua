-- ARGV: now, then (message id, body, visible at, lane, group) per message; visible at
-- <= now is ready. One uid counter step for the whole call, one XADD and one HINCRBY a
-- ready message: a relay page's cost on the server is about its entries. A message
-- naming a group goes to its lane's stream of that group (made, and named in the
-- lane's set of groups, with its first entry).
local now = ARGV[1]
local nowf = tonumber(now)
local count = (#ARGV - 1) / 5
local first = redis.call('INCRBY', SEQ, count) - count
local grouped, streams = {}, {}
local rang = false
for n = 0, count - 1 do
  local i = 2 + 5 * n
  local uid = tostring(first + n + 1)
  local lane = lane_of(ARGV[i + 3])
  local grp = ARGV[i + 4]
  redis.call('HINCRBY', I, ARGV[i], 1)
  if tonumber(ARGV[i + 2]) <= nowf then
    local s
    if grp == '' then
      -- The group is made with the lane's stream (from its first entry: id 0).
      if not grouped[lane] then
        ensure_group(lane)
        grouped[lane] = true
      end
      s = SL[lane + 1]
    else
      local at = lane .. ':' .. grp
      s = streams[at]
      if s == nil then
        s = open_group(lane, grp)
        streams[at] = s
      end
      rang = true
    end
    redis.call('XADD', s, '*', 'id', ARGV[i], 'body', ARGV[i + 1], 'enq', now,
               'uid', uid, 'rc', '0')
  else
    park({id = ARGV[i], body = ARGV[i + 1], enq = now, lane = lane, grp = grp}, uid, '0',
         ARGV[i + 2])
  end
end
-- Waiters block on the lanes' streams and this one, not on every group's.
if rang then redis.call('XADD', BELL, 'MAXLEN', 1, '*', 'g', '1') end
return count
