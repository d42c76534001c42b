-- ARGV: now, visible until, lane, then (group, most) per group to take from ('': the
-- lane's messages that name none). One pass of a fair receive (tidings.core.fair
-- decides the shares). Answers a 0, then per message what hand_out says; the caller
-- tells the groups apart by the entry refs.
local now, until_at, lane = ARGV[1], ARGV[2], lane_of(ARGV[3])
local taken = {}
for i = 4, #ARGV, 2 do
  local most = tonumber(ARGV[i + 1])
  if most > 0 then take_from(lane, ARGV[i], most, now, taken) end
end
return hand_out(taken, until_at, 0)
