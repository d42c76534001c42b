-- ARGV: now, visible until, max messages, most delayed messages to move in.
-- Returns per message: entry id, message id, body, enqueued at, receive count, failures,
-- token (the delivery count of the entry), message uid.
ensure_group()
local now, until_at, max, moves = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
-- Delayed messages that fell due join the stream, oldest due first.
for _, uid in ipairs(redis.call('ZRANGEBYSCORE', D, '-inf', now, 'LIMIT', 0, moves)) do
  local packed = redis.call('HGET', P, uid)
  if packed then
    local m = cjson.decode(packed)
    append(m, uid, m.rc, true)
    redis.call('HDEL', P, uid)
  end
  redis.call('ZREM', D, uid)
end
local taken = {}
-- In-flight messages whose visibility timeout passed come back first (claimed again:
-- the delivery count grows, which makes the old receipt stale).
for _, eid in ipairs(redis.call('ZRANGEBYSCORE', V, '-inf', now, 'LIMIT', 0, max)) do
  local m = entry(eid)
  if m == nil then
    redis.call('XACK', S, GROUP, eid)
    redis.call('ZREM', V, eid)
  elseif foreign(m) then
    refuse(eid, m, foreign(m), now)
  else
    redis.call('XCLAIM', S, GROUP, CONSUMER, 0, eid)
    m.eid = eid
    m.deliveries = deliveries(eid)
    table.insert(taken, m)
  end
end
table.sort(taken, function(a, b)
  local ea, eb = tonumber(a.enq), tonumber(b.enq)
  if ea ~= eb then return ea < eb end
  return tonumber(a.uid) < tonumber(b.uid)
end)
if #taken < max then
  local read = redis.call('XREADGROUP', 'GROUP', GROUP, CONSUMER, 'COUNT', max - #taken,
                          'STREAMS', S, '>')
  if read then
    for _, e in ipairs(read[1][2]) do
      local m = fields_of(e[2])
      local wrong = foreign(m)
      if wrong then
        refuse(e[1], m, wrong, now)
      else
        m.eid = e[1]
        m.deliveries = 1
        table.insert(taken, m)
      end
    end
  end
end
-- One ZADD and one HMGET for the batch.
local hidden, uids = {}, {}
for _, m in ipairs(taken) do
  hidden[#hidden + 1] = until_at
  hidden[#hidden + 1] = m.eid
  uids[#uids + 1] = m.uid
end
local failures = {}
if #uids > 0 then
  call_many('ZADD', V, hidden)
  for first = 1, #uids, UNPACK do
    local part = redis.call('HMGET', F, unpack(uids, first, math.min(#uids, first + UNPACK - 1)))
    for _, v in ipairs(part) do failures[#failures + 1] = v end
  end
end
local out = {}
for n, m in ipairs(taken) do
  for _, v in ipairs({m.eid, m.id, m.body, m.enq, tostring(tonumber(m.rc) + m.deliveries),
                      failures[n] or '0', tostring(m.deliveries), m.uid}) do
    table.insert(out, v)
  end
end
return out
