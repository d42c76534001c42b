-- ARGV: (entry id, message uid) per receipt. By the message alone, wherever it is now
-- (its entry, another entry after a nack, parked): whoever acks has recorded the
-- outcome. A message already gone is a no-op. A message the where-hash does not name
-- never moved: it is at the receipt's entry, if that is still there. The batch's
-- removals go out as one command each (XACK, XDEL, ZREM, HDEL of many), so a batch
-- costs about one entry read and one counter step a message.
local count = 0
local eids, uids = {}, {}
for i = 1, #ARGV, 2 do
  eids[#eids + 1] = ARGV[i]
  uids[#uids + 1] = ARGV[i + 1]
end
local where = {}
for first = 1, #uids, UNPACK do
  local part = redis.call('HMGET', W, unpack(uids, first, math.min(#uids, first + UNPACK - 1)))
  for _, v in ipairs(part) do where[#where + 1] = v end
end
local dropped, stale, gone, seen = {}, {}, {}, {}
for n, uid in ipairs(uids) do
  local eid, now_at = eids[n], where[n]
  if not seen[uid] then
    seen[uid] = true
    local m = nil
    if now_at == 'p' then
      local packed = redis.call('HGET', P, uid)
      if packed then m = cjson.decode(packed) end
      redis.call('HDEL', P, uid)
      redis.call('ZREM', D, uid)
    else
      local at = now_at or eid
      m = entry(at)
      if m == nil or m.uid == uid then dropped[#dropped + 1] = at else m = nil end
    end
    if m ~= nil then
      if redis.call('HINCRBY', I, m.id, -1) <= 0 then redis.call('HDEL', I, m.id) end
      gone[#gone + 1] = uid
      count = count + 1
    end
  end
  if now_at and now_at ~= eid then stale[#stale + 1] = eid end
end
-- drop() and forget() of common.lua, for the whole batch.
if #dropped > 0 then
  call_many('XACK', S, dropped, GROUP)
  call_many('XDEL', S, dropped)
  call_many('ZREM', V, dropped)
end
if #stale > 0 then
  call_many('XACK', S, stale, GROUP)
  call_many('ZREM', V, stale)
end
if #gone > 0 then
  call_many('HDEL', F, gone)
  call_many('HDEL', W, gone)
  call_many('ZREM', A, gone)
end
return count
