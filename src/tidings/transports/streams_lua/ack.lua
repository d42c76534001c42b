-- ARGV: (entry ref, message uid) per receipt. By the message alone, wherever it is now
-- (its entry, another entry after a nack, parked): whoever acks has recorded the
-- outcome. A message already gone is a no-op. A message the where-hash does not name
-- never moved: it is at the receipt's entry, if that is still there. The batch's
-- removals go out as one command a lane each (XACK, XDEL, ZREM, HDEL of many), so a
-- batch costs about one entry read and one counter step a message.
local count = 0
local refs, uids = {}, {}
for i = 1, #ARGV, 2 do
  refs[#refs + 1] = ARGV[i]
  uids[#uids + 1] = ARGV[i + 1]
end
local where = {}
for first = 1, #uids, UNPACK do
  local part = redis.call('HMGET', W, unpack(uids, first, math.min(#uids, first + UNPACK - 1)))
  for _, v in ipairs(part) do where[#where + 1] = v end
end
-- By lane + 1: entries to drop, stale entries to settle, uids whose age goes.
local dropped, stale, aged = {}, {}, {}
for n = 1, LANES do dropped[n], stale[n], aged[n] = {}, {}, {} end
local gone, seen = {}, {}
for n, uid in ipairs(uids) do
  local ref, now_at = refs[n], where[n]
  if not seen[uid] then
    seen[uid] = true
    local m, lane = nil, 0
    if now_at == 'p' then
      local packed = redis.call('HGET', P, uid)
      if packed then
        m = cjson.decode(packed)
        lane = lane_of(m.lane)
      end
      redis.call('HDEL', P, uid)
      redis.call('ZREM', DLY[lane + 1], uid)
    else
      local eid
      lane, eid = split_ref(now_at or ref)
      m = entry(lane, eid)
      if m == nil or m.uid == uid then
        table.insert(dropped[lane + 1], eid)
      else
        m = nil
      end
    end
    if m ~= nil then
      if redis.call('HINCRBY', I, m.id, -1) <= 0 then redis.call('HDEL', I, m.id) end
      gone[#gone + 1] = uid
      table.insert(aged[lane + 1], uid)
      count = count + 1
    end
  end
  if now_at and now_at ~= ref then
    local lane, eid = split_ref(ref)
    table.insert(stale[lane + 1], eid)
  end
end
-- drop() and forget() of common.lua, for the whole batch.
for n = 1, LANES do
  if #dropped[n] > 0 then
    call_many('XACK', SL[n], dropped[n], GROUP)
    call_many('XDEL', SL[n], dropped[n])
    call_many('ZREM', VL[n], dropped[n])
  end
  if #stale[n] > 0 then
    call_many('XACK', SL[n], stale[n], GROUP)
    call_many('ZREM', VL[n], stale[n])
  end
  if #aged[n] > 0 then call_many('ZREM', AL[n], aged[n]) end
end
if #gone > 0 then
  call_many('HDEL', F, gone)
  call_many('HDEL', W, gone)
end
return count
