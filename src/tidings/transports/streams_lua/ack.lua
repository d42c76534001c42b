-- ARGV: (entry id, message uid) per receipt. By the message alone, wherever it is now
-- (its entry, another entry after a nack, parked): whoever acks has recorded the
-- outcome. A message already gone is a no-op. A message the where-hash does not name
-- never moved: it is at the receipt's entry, if that is still there.
local count = 0
for i = 1, #ARGV, 2 do
  local eid, uid = ARGV[i], ARGV[i + 1]
  local now_at = redis.call('HGET', W, uid)
  local m = nil
  if now_at == 'p' then
    local packed = redis.call('HGET', P, uid)
    if packed then m = cjson.decode(packed) end
    redis.call('HDEL', P, uid)
    redis.call('ZREM', D, uid)
  else
    local at = now_at or eid
    m = entry(at)
    if m == nil or m.uid == uid then drop(at) else m = nil end
  end
  if m ~= nil then
    m.uid = uid
    forget(m)
    count = count + 1
  end
  if now_at and now_at ~= eid then
    redis.call('XACK', S, GROUP, eid)
    redis.call('ZREM', V, eid)
  end
end
return count
