-- ARGV: now, most delayed messages to move in, lane, after, limit, named only (1/0).
-- The groups with messages in the lane's streams ('' for the lane's own, first in name
-- order), at most ``limit``, those after ``after`` first and then from the start (a
-- fair receive goes round them: tidings.core.fair.FairShare.after). Due delayed
-- messages join their streams first, so their groups are counted.
local now, moves, lane, after, limit = ARGV[1], tonumber(ARGV[2]), lane_of(ARGV[3]), ARGV[4],
  tonumber(ARGV[5])
local named_only = ARGV[6] == '1'
move_due(now, moves)
local reg = REG[lane + 1]
local out, seen = {}, {}
local function add(list)
  for _, g in ipairs(list) do
    if #out >= limit then return end
    if not seen[g] then
      seen[g] = true
      out[#out + 1] = g
    end
  end
end
local function from_start()
  if not named_only and redis.call('XLEN', SL[lane + 1]) > 0 then add({''}) end
  if #out < limit then add(redis.call('ZRANGEBYLEX', reg, '-', '+', 'LIMIT', 0, limit)) end
end
if after == '' then
  from_start()
else
  add(redis.call('ZRANGEBYLEX', reg, '(' .. after, '+', 'LIMIT', 0, limit))
  if #out < limit then from_start() end
end
return out
