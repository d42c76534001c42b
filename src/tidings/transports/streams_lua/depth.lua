-- ARGV: now. Returns ready, delayed, in flight, dead, oldest enqueued at ('' if none),
-- next visible at ('' if none), then per lane from 0: its stream's last entry id
-- ('0-0' if none), its ready count, all its messages, its oldest enqueued at ('' if
-- none).
local now = ARGV[1]
local ready, delayed, in_flight, oldest, next_at = 0, 0, 0, nil, nil
local lanes = {}
for n = 1, LANES do
  local s, v, d = SL[n], VL[n], DLY[n]
  local in_stream = redis.call('XLEN', s)
  local vis_all = redis.call('ZCARD', v)
  local vis_due = redis.call('ZCOUNT', v, '-inf', now)
  local delayed_all = redis.call('ZCARD', d)
  local delayed_due = redis.call('ZCOUNT', d, '-inf', now)
  local lane_ready = (in_stream - vis_all) + vis_due + delayed_due
  ready = ready + lane_ready
  delayed = delayed + delayed_all - delayed_due
  in_flight = in_flight + vis_all - vis_due
  local first = redis.call('ZRANGE', AL[n], 0, 0, 'WITHSCORES')[2]
  local head = redis.call('XRANGE', s, '-', '+', 'COUNT', 1)[1]
  if head then
    -- A foreign entry (not yet refused by a receive) may have no number here.
    local enq = fields_of(head[2]).enq
    if tonumber(enq) and (first == nil or tonumber(enq) < tonumber(first)) then
      first = enq
    end
  end
  if first and (oldest == nil or tonumber(first) < tonumber(oldest)) then oldest = first end
  for _, key in ipairs({v, d}) do
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
return out
