-- ARGV: now, visible until, max messages, most delayed messages to move in, then the
-- lanes to take from, in order. Returns per message: entry ref, message id, body,
-- enqueued at, receive count, failures, token (the delivery count of the entry),
-- message uid, lane.
local now, until_at, max, moves = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
-- Delayed messages that fell due join their lane's stream, oldest due first in each
-- lane (every lane's: a lane not asked now is counted ready, and asked later).
for lane = 0, LANES - 1 do
  if moves <= 0 then break end
  local due = redis.call('ZRANGEBYSCORE', DLY[lane + 1], '-inf', now, 'LIMIT', 0, moves)
  moves = moves - #due
  for _, uid in ipairs(due) do
    local packed = redis.call('HGET', P, uid)
    if packed then
      local m = cjson.decode(packed)
      m.lane = lane
      append(m, uid, m.rc, true)
      redis.call('HDEL', P, uid)
    end
    redis.call('ZREM', DLY[lane + 1], uid)
  end
end
local taken = {}
-- Lane by lane in the order asked, as long as there is room: in each, in-flight
-- messages whose visibility timeout passed come back first (claimed again: the
-- delivery count grows, which makes the old receipt stale), then the stream's new
-- entries.
for i = 5, #ARGV do
  if #taken >= max then break end
  local lane = lane_of(ARGV[i])
  local s, v = SL[lane + 1], VL[lane + 1]
  local back = {}
  for _, eid in ipairs(redis.call('ZRANGEBYSCORE', v, '-inf', now, 'LIMIT', 0, max - #taken)) do
    local m = entry(lane, eid)
    if m == nil then
      redis.call('XACK', s, GROUP, eid)
      redis.call('ZREM', v, eid)
    elseif foreign(m) then
      refuse(lane, eid, m, foreign(m), now)
    else
      redis.call('XCLAIM', s, GROUP, CONSUMER, 0, eid)
      m.eid = eid
      m.lane = lane
      m.deliveries = deliveries(lane, eid)
      table.insert(back, m)
    end
  end
  table.sort(back, function(a, b)
    local ea, eb = tonumber(a.enq), tonumber(b.enq)
    if ea ~= eb then return ea < eb end
    return tonumber(a.uid) < tonumber(b.uid)
  end)
  for _, m in ipairs(back) do taken[#taken + 1] = m end
  -- A lane never published to has no stream, and nothing to read (lane 0's is made,
  -- as before lanes: a foreign writer's entries there are refused).
  if #taken < max and (lane == 0 or redis.call('EXISTS', s) == 1) then
    ensure_group(lane)
    local read = redis.call('XREADGROUP', 'GROUP', GROUP, CONSUMER, 'COUNT', max - #taken,
                            'STREAMS', s, '>')
    if read then
      for _, e in ipairs(read[1][2]) do
        local m = fields_of(e[2])
        local wrong = foreign(m)
        if wrong then
          refuse(lane, e[1], m, wrong, now)
        else
          m.eid = e[1]
          m.lane = lane
          m.deliveries = 1
          table.insert(taken, m)
        end
      end
    end
  end
end
-- One ZADD a lane and one HMGET for the batch.
local hidden, uids = {}, {}
for n = 1, LANES do hidden[n] = {} end
for _, m in ipairs(taken) do
  local h = hidden[m.lane + 1]
  h[#h + 1] = until_at
  h[#h + 1] = m.eid
  uids[#uids + 1] = m.uid
end
local failures = {}
if #uids > 0 then
  for n = 1, LANES do
    if #hidden[n] > 0 then call_many('ZADD', VL[n], hidden[n]) end
  end
  for first = 1, #uids, UNPACK do
    local part = redis.call('HMGET', F, unpack(uids, first, math.min(#uids, first + UNPACK - 1)))
    for _, v in ipairs(part) do failures[#failures + 1] = v end
  end
end
local out = {}
for n, m in ipairs(taken) do
  for _, v in ipairs({ref_of(m.lane, m.eid), m.id, m.body, m.enq,
                      tostring(tonumber(m.rc) + m.deliveries), failures[n] or '0',
                      tostring(m.deliveries), m.uid, tostring(m.lane)}) do
    table.insert(out, v)
  end
end
return out
