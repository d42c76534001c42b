-- Shared by every script (prepended when loaded). Keys of one queue, in this order:
-- KEYS[1] stream   lane 0's ready and in-flight messages (consumer group "tidings")
-- KEYS[2] vis      sorted set: lane 0's in-flight stream entry id -> visible again at
--                  (caller's clock)
-- KEYS[3] delayed  sorted set: lane 0's message uid -> visible at (delayed publishes
--                  and nacks)
-- KEYS[4] parked   hash: message uid -> the delayed message (JSON of strings, its lane)
-- KEYS[5] failures hash: message uid -> failures counted by failed nacks
-- KEYS[6] ids      hash: message id -> copies on the queue (contains)
-- KEYS[7] ages     sorted set: lane 0's message uid -> enqueued at, for a message out
--                  of its place in enqueue order (parked, nacked back to the tail); a
--                  fresh entry's age is its own field: the oldest message is the older
--                  of the stream's first entry and this set's first
-- KEYS[8] dead     stream of dead letters with their reason and lane
-- KEYS[9] seq      counter of message uids
-- KEYS[10] where   hash: message uid -> its entry's ref (see ref_of), or 'p' while
--                  parked; only for a message that moved (nacked, parked): a message
--                  absent from it is still at the entry it was published as (publish
--                  writes no field)
-- KEYS[11..13], [14..16], [17..19], [20..22]: stream, vis, delayed and ages of lanes
-- 1 to 3, as lane 0's above. Lane 0 keeps the keys a queue had before lanes, so what a
-- deployment held then is lane 0's.
local S, V, D, P, F, I, A, DL, SEQ, W =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local LANES = 4
-- Each lane's keys, by lane + 1.
local SL = {S, KEYS[11], KEYS[12], KEYS[13]}
local VL = {V, KEYS[14], KEYS[15], KEYS[16]}
local DLY = {D, KEYS[17], KEYS[18], KEYS[19]}
local AL = {A, KEYS[20], KEYS[21], KEYS[22]}
local GROUP = 'tidings'
local CONSUMER = 'tidings'

-- A lane number as stored (a parked message's, a dead letter's): 0 when absent or out
-- of range, so what was written before lanes, or by hand, is lane 0's.
local function lane_of(value)
  local lane = tonumber(value)
  if lane == nil or lane < 0 or lane >= LANES or lane % 1 ~= 0 then return 0 end
  return lane
end

-- An entry's ref, as receipts and the where-hash carry it: its id in lane 0 (as before
-- lanes), 'id@n' in lane n; split_ref gives back (lane, id).
local function ref_of(lane, eid)
  if lane == 0 then return eid end
  return eid .. '@' .. lane
end

local function split_ref(ref)
  local eid, lane = string.match(ref, '^(.-)@(%d)$')
  if eid == nil then return 0, ref end
  return lane_of(lane), eid
end

local function ensure_group(lane)
  local ok = redis.pcall('XGROUP', 'CREATE', SL[lane + 1], GROUP, '0', 'MKSTREAM')
  if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP') then
    error(ok.err)
  end
end

local function fields_of(flat)
  local m = {}
  for i = 1, #flat, 2 do m[flat[i]] = flat[i + 1] end
  return m
end

-- The entry's fields, or nil once it is gone.
local function entry(lane, eid)
  local found = redis.call('XRANGE', SL[lane + 1], eid, eid)
  if #found == 0 then return nil end
  return fields_of(found[1][2])
end

-- How many times the group delivered the pending entry (nil when not pending).
local function deliveries(lane, eid)
  local p = redis.call('XPENDING', SL[lane + 1], GROUP, eid, eid, 1)
  if #p == 0 then return nil end
  return tonumber(p[1][4])
end

-- The entry ``ref`` names when ``token`` is still its delivery count and it is in
-- flight (a stale receipt gets nil), with its lane and id.
local function held(ref, token)
  local lane, eid = split_ref(ref)
  if not redis.call('ZSCORE', VL[lane + 1], eid) then return nil end
  local count = deliveries(lane, eid)
  if count == nil or tostring(count) ~= token then return nil end
  local m = entry(lane, eid)
  if m == nil then return nil end
  m.deliveries = count
  m.lane = lane
  m.eid = eid
  return m
end

-- A new entry for the message in its lane (``m.lane``). A ``moved`` one (nacked, or
-- parked until now) records where it went and its age; a fresh one is found at its
-- receipt's entry and is in enqueue order at its stream's tail.
local function append(m, uid, rc, moved)
  local lane = m.lane or 0
  local eid = redis.call('XADD', SL[lane + 1], '*', 'id', m.id, 'body', m.body, 'enq', m.enq,
                         'uid', uid, 'rc', rc)
  if moved then
    redis.call('HSET', W, uid, ref_of(lane, eid))
    redis.call('ZADD', AL[lane + 1], m.enq, uid)
  end
  return eid
end

-- ``redis.call(command, key[, lead], ...)`` with the table's items as its last
-- arguments, in calls of at most ``UNPACK`` items (Lua's stack limit on unpack).
local UNPACK = 4000
local function call_many(command, key, items, lead)
  for first = 1, #items, UNPACK do
    local last = math.min(#items, first + UNPACK - 1)
    if lead then
      redis.call(command, key, lead, unpack(items, first, last))
    else
      redis.call(command, key, unpack(items, first, last))
    end
  end
end

-- Park a message until ``at`` (a delayed publish, a nack with a delay), in its lane.
local function park(m, uid, rc, at)
  local lane = m.lane or 0
  redis.call('HSET', P, uid, cjson.encode({id = m.id, body = m.body, enq = m.enq, rc = rc,
                                           lane = tostring(lane)}))
  redis.call('ZADD', DLY[lane + 1], at, uid)
  redis.call('HSET', W, uid, 'p')
  redis.call('ZADD', AL[lane + 1], m.enq, uid)
end

-- Remove a pending entry of ``lane`` from its stream and the group.
local function drop(lane, eid)
  local s = SL[lane + 1]
  redis.call('XACK', s, GROUP, eid)
  redis.call('XDEL', s, eid)
  redis.call('ZREM', VL[lane + 1], eid)
end

-- What is wrong with an entry tidings did not write (a foreign XADD into the stream):
-- nil for one of ours.
local function foreign(m)
  for _, name in ipairs({'id', 'body', 'enq', 'uid', 'rc'}) do
    if m[name] == nil then return 'no field ' .. name end
  end
  for _, name in ipairs({'uid', 'rc'}) do
    -- At most 15 digits: a double holds them exactly, and tostring keeps them digits.
    if not string.match(m[name], '^%d+$') or #m[name] > 15 then
      return 'field ' .. name .. ' is not a whole number'
    end
  end
  -- Decimal only, as tidings writes it: Lua would also read 0x10, which Python does not.
  local e = m.enq
  local decimal = string.match(e, '^%-?%d+%.?%d*$') or string.match(e, '^%-?%d*%.%d+$')
    or string.match(e, '^%-?%d+%.?%d*[eE][%-+]?%d+$')
  local enq = decimal and tonumber(e)
  if not enq or enq ~= enq or enq == math.huge or enq == -math.huge then
    return 'field enq is not a time'
  end
  return nil
end

-- Dead-letter a foreign entry at once, with what is wrong with it: handed to a worker
-- it would have no message to settle, and every receive after it would fail.
local function refuse(lane, eid, m, why, now)
  redis.call('XADD', DL, '*', 'id', m.id or eid, 'body', m.body or '',
             'reason', 'not a tidings message: ' .. why, 'rc', '1', 'dead_at', now,
             'enq', now, 'lane', tostring(lane))
  drop(lane, eid)
end

-- The message leaves the queue for good (acked or dead-lettered).
local function forget(m)
  redis.call('HDEL', F, m.uid)
  redis.call('HDEL', W, m.uid)
  redis.call('ZREM', AL[(m.lane or 0) + 1], m.uid)
  if redis.call('HINCRBY', I, m.id, -1) <= 0 then redis.call('HDEL', I, m.id) end
end
