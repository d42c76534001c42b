-- ARGV: now. Returns ready, delayed, in flight, dead, oldest enqueued at ('' if none),
-- next visible at ('' if none), then per lane from 0: its stream's last entry id
-- ('0-0' if none), its ready count, all its messages (its groups' too), its oldest
-- enqueued at ('' if none); then the bell's last entry id ('0-0' if none); then for
-- each group of each lane: its lane, its name, its ready count and its messages (those
-- delayed are counted in their lane only: the lane's delayed set holds them).
local now = ARGV[1]
local ready, delayed, in_flight, oldest, next_at = 0, 0, 0, nil, nil
local lanes = {}
local groups = {}
for n = 1, LANES do
  local s, v, d = SL[n], VL[n], DLY[n]
  -- The lane's own stream, then each of its groups' (in the lane's set of groups).
  local in_stream, vis_all, vis_due, heads, vis_keys = 0, 0, 0, {}, {}
  local lane_streams = {{s, v}}
  for _, grp in ipairs(redis.call('ZRANGE', REG[n], 0, -1)) do
    local gs, gv = stream_of(n - 1, grp)
    lane_streams[#lane_streams + 1] = {gs, gv}
    local g_len, g_vis = redis.call('XLEN', gs), redis.call('ZCARD', gv)
    for _, value in ipairs({n - 1, grp, g_len - g_vis + redis.call('ZCOUNT', gv, '-inf', now),
                            g_len}) do
      groups[#groups + 1] = value
    end
  end
  for _, pair in ipairs(lane_streams) do
    in_stream = in_stream + redis.call('XLEN', pair[1])
    vis_all = vis_all + redis.call('ZCARD', pair[2])
    vis_due = vis_due + redis.call('ZCOUNT', pair[2], '-inf', now)
    heads[#heads + 1] = redis.call('XRANGE', pair[1], '-', '+', 'COUNT', 1)[1]
    vis_keys[#vis_keys + 1] = pair[2]
  end
  local delayed_all = redis.call('ZCARD', d)
  local delayed_due = redis.call('ZCOUNT', d, '-inf', now)
  local lane_ready = (in_stream - vis_all) + vis_due + delayed_due
  ready = ready + lane_ready
  delayed = delayed + delayed_all - delayed_due
  in_flight = in_flight + vis_all - vis_due
  local first = redis.call('ZRANGE', AL[n], 0, 0, 'WITHSCORES')[2]
  for _, head in pairs(heads) do
    -- A foreign entry (not yet refused by a receive) may have no number here.
    local enq = fields_of(head[2]).enq
    if tonumber(enq) and (first == nil or tonumber(enq) < tonumber(first)) then
      first = enq
    end
  end
  if first and (oldest == nil or tonumber(first) < tonumber(oldest)) then oldest = first end
  vis_keys[#vis_keys + 1] = d
  for _, key in ipairs(vis_keys) do
    local due = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #due > 0 and (next_at == nil or tonumber(due[2]) < tonumber(next_at)) then
      next_at = due[2]
    end
  end
  local last = redis.call('XREVRANGE', s, '+', '-', 'COUNT', 1)
  for _, value in ipairs({last[1] and last[1][1] or '0-0', lane_ready,
                          in_stream + delayed_all, first or ''}) do
    lanes[#lanes + 1] = value
  end
end
local out = {ready, delayed, in_flight, redis.call('XLEN', DL), oldest or '', next_at or ''}
for _, value in ipairs(lanes) do out[#out + 1] = value end
local bell = redis.call('XREVRANGE', BELL, '+', '-', 'COUNT', 1)
out[#out + 1] = bell[1] and bell[1][1] or '0-0'
for _, value in ipairs(groups) do out[#out + 1] = value end
return out
