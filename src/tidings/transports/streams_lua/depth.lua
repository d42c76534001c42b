-- ARGV: now. Returns ready, delayed, in flight, dead, oldest enqueued at ('' if none),
-- next visible at ('' if none), last stream entry id ('0-0' if none).
local now = ARGV[1]
local in_stream = redis.call('XLEN', S)
local vis_all = redis.call('ZCARD', V)
local vis_due = redis.call('ZCOUNT', V, '-inf', now)
local delayed_all = redis.call('ZCARD', D)
local delayed_due = redis.call('ZCOUNT', D, '-inf', now)
local ready = (in_stream - vis_all) + vis_due + delayed_due
local oldest = redis.call('ZRANGE', A, 0, 0, 'WITHSCORES')[2]
local head = redis.call('XRANGE', S, '-', '+', 'COUNT', 1)[1]
if head then
  -- A foreign entry (not yet refused by a receive) may have no number here.
  local enq = fields_of(head[2]).enq
  if tonumber(enq) and (oldest == nil or tonumber(enq) < tonumber(oldest)) then
    oldest = enq
  end
end
local next_at = ''
for _, key in ipairs({V, D}) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 and (next_at == '' or tonumber(first[2]) < tonumber(next_at)) then
    next_at = first[2]
  end
end
local last = redis.call('XREVRANGE', S, '+', '-', 'COUNT', 1)
return {ready, delayed_all - delayed_due, vis_all - vis_due, redis.call('XLEN', DL),
        oldest or '', next_at, last[1] and last[1][1] or '0-0'}
