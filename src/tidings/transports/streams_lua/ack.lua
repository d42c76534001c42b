-- ARGV: (entry ref, message uid) per receipt. By the message alone, wherever it is now
-- (its entry, another entry after a nack, parked): whoever acks has recorded the
-- outcome. A message already gone is a no-op. A message the where-hash does not name
-- never moved: it is at the receipt's entry, if that is still there. The batch's
-- removals go out as one command a stream each (XACK, XDEL, ZREM, HDEL of many), so a
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
-- By stream (a lane's, or a lane's group's): entries to drop, stale entries to settle,
-- in the order first met; by lane + 1: uids whose age goes.
local streams, dropped, stale, aged = {}, {}, {}, {}
for n = 1, LANES do aged[n] = {} end
local function at(lane, grp)
  local s = stream_of(lane, grp)
  if dropped[s] == nil then
    dropped[s], stale[s] = {}, {}
    streams[#streams + 1] = {s, lane, grp}
  end
  return s
end
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
      local eid, grp
      lane, eid, grp = split_ref(now_at or ref)
      m = entry(lane, eid, grp)
      if m == nil or m.uid == uid then
        table.insert(dropped[at(lane, grp)], eid)
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
    local lane, eid, grp = split_ref(ref)
    table.insert(stale[at(lane, grp)], eid)
  end
end
-- drop() and forget() of common.lua, for the whole batch.
for _, key in ipairs(streams) do
  local s, lane, grp = key[1], key[2], key[3]
  local _, v = stream_of(lane, grp)
  if #dropped[s] > 0 then
    call_many('XACK', s, dropped[s], GROUP)
    call_many('XDEL', s, dropped[s])
    call_many('ZREM', v, dropped[s])
  end
  if #stale[s] > 0 then
    call_many('XACK', s, stale[s], GROUP)
    call_many('ZREM', v, stale[s])
  end
  settle_group(lane, grp)
end
for n = 1, LANES do
  if #aged[n] > 0 then call_many('ZREM', AL[n], aged[n]) end
end
if #gone > 0 then
  call_many('HDEL', F, gone)
  call_many('HDEL', W, gone)
end
return count
