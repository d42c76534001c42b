-- ARGV: now, then dead letter ids. Each goes back as a fresh message, visible now, in
-- the lane and group it was dead-lettered from (lane 0 and no group for one written
-- before them).
local now = ARGV[1]
local count = 0
for i = 2, #ARGV do
  local found = redis.call('XRANGE', DL, ARGV[i], ARGV[i])
  if #found > 0 then
    local d = fields_of(found[1][2])
    local lane = lane_of(d.lane)
    local uid = tostring(redis.call('INCR', SEQ))
    if (d.grp or '') == '' then ensure_group(lane) end
    redis.call('HINCRBY', I, d.id, 1)
    append({id = d.id, body = d.body, enq = now, lane = lane, grp = d.grp}, uid, '0', false)
    redis.call('XDEL', DL, ARGV[i])
    count = count + 1
  end
end
return count
