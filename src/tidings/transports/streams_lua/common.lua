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
-- KEYS[23..26] groups  sorted set per lane 0 to 3 (score 0, in name order): the groups
--                  whose stream holds entries (ready or in flight). A message that
--                  names a group (tidings.core.fair) is kept in a stream and vis of its
--                  lane and group, '<base>:gstream:<lane>:<group>' and '…:gvis:…', named
--                  here from the queue's base (they share its hash tag, so its slot);
--                  a message naming none stays in its lane's stream. A group joins the
--                  set with its stream's first entry and leaves it, its two keys
--                  deleted, with its last, in the same script: never missing while it
--                  has entries. Delayed messages of a group wait in their lane's
--                  delayed set (their group in the parked JSON) and join its stream
--                  when due.
-- KEYS[27] bell    a stream of one entry, added to when a group's stream gets a ready
--                  message: wait blocks on it besides the lanes' streams.
local S, V, D, P, F, I, A, DL, SEQ, W =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local LANES = 4
-- Each lane's keys, by lane + 1.
local SL = {S, KEYS[11], KEYS[12], KEYS[13]}
local VL = {V, KEYS[14], KEYS[15], KEYS[16]}
local DLY = {D, KEYS[17], KEYS[18], KEYS[19]}
local AL = {A, KEYS[20], KEYS[21], KEYS[22]}
local REG = {KEYS[23], KEYS[24], KEYS[25], KEYS[26]}
local BELL = KEYS[27]
-- The keys' common part: KEYS[1] less its ':stream'.
local BASE = string.sub(S, 1, -8)
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
-- lanes), 'id@n' in lane n, 'id@n#group' in a group's stream (the group last and
-- verbatim: an entry id has no '@'); split_ref gives back (lane, id, group).
local function ref_of(lane, eid, grp)
  if grp ~= nil and grp ~= '' then return eid .. '@' .. lane .. '#' .. grp end
  if lane == 0 then return eid end
  return eid .. '@' .. lane
end

local function split_ref(ref)
  local eid, lane, grp = string.match(ref, '^([^@]*)@(%d)#(.*)$')
  if eid ~= nil then return lane_of(lane), eid, grp end
  eid, lane = string.match(ref, '^(.-)@(%d)$')
  if eid == nil then return 0, ref, '' end
  return lane_of(lane), eid, ''
end

-- The stream and vis of a lane's group ('' or nil: the lane's own).
local function stream_of(lane, grp)
  if grp == nil or grp == '' then return SL[lane + 1], VL[lane + 1] end
  return BASE .. ':gstream:' .. lane .. ':' .. grp, BASE .. ':gvis:' .. lane .. ':' .. grp
end

local function ensure_stream(s)
  local ok = redis.pcall('XGROUP', 'CREATE', s, GROUP, '0', 'MKSTREAM')
  if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP') then
    error(ok.err)
  end
end

local function ensure_group(lane)
  ensure_stream(SL[lane + 1])
end

-- A group's stream about to get an entry: made with its consumer group and named in
-- the lane's set of groups (both no-ops when already so).
local function open_group(lane, grp)
  local s = stream_of(lane, grp)
  if redis.call('EXISTS', s) == 0 then ensure_stream(s) end
  redis.call('ZADD', REG[lane + 1], 0, grp)
  return s
end

-- After entries left a group's stream: the last gone, the group leaves its lane's set
-- and its keys are deleted (a stream keeps its consumer group when empty).
local function settle_group(lane, grp)
  if grp == nil or grp == '' then return end
  local s, v = stream_of(lane, grp)
  if redis.call('XLEN', s) == 0 then
    redis.call('ZREM', REG[lane + 1], grp)
    redis.call('DEL', s, v)
  end
end

local function fields_of(flat)
  local m = {}
  for i = 1, #flat, 2 do m[flat[i]] = flat[i + 1] end
  return m
end

-- The entry's fields, or nil once it is gone.
local function entry(lane, eid, grp)
  local found = redis.call('XRANGE', (stream_of(lane, grp)), eid, eid)
  if #found == 0 then return nil end
  return fields_of(found[1][2])
end

-- How many times the group delivered the pending entry (nil when not pending).
local function deliveries(lane, eid, grp)
  local p = redis.call('XPENDING', (stream_of(lane, grp)), GROUP, eid, eid, 1)
  if #p == 0 then return nil end
  return tonumber(p[1][4])
end

-- The entry ``ref`` names when ``token`` is still its delivery count and it is in
-- flight (a stale receipt gets nil), with its lane, group and id. ``uid``, when given,
-- must be the entry's too: a group's stream is deleted when drained and made again,
-- so an entry id may come back for another message.
local function held(ref, token, uid)
  local lane, eid, grp = split_ref(ref)
  local _, v = stream_of(lane, grp)
  if not redis.call('ZSCORE', v, eid) then return nil end
  local count = deliveries(lane, eid, grp)
  if count == nil or tostring(count) ~= token then return nil end
  local m = entry(lane, eid, grp)
  if m == nil or (uid ~= nil and uid ~= '' and m.uid ~= uid) then return nil end
  m.deliveries = count
  m.lane = lane
  m.grp = grp
  m.eid = eid
  return m
end

-- A new entry for the message in its lane and group (``m.lane``, ``m.grp``). A
-- ``moved`` one (nacked, or parked until now) records where it went and its age; a
-- fresh one is found at its receipt's entry and is in enqueue order at its stream's
-- tail.
local function append(m, uid, rc, moved)
  local lane, grp = m.lane or 0, m.grp or ''
  local s = SL[lane + 1]
  if grp ~= '' then
    s = open_group(lane, grp)
    redis.call('XADD', BELL, 'MAXLEN', 1, '*', 'g', '1')
  end
  local eid = redis.call('XADD', s, '*', 'id', m.id, 'body', m.body, 'enq', m.enq,
                         'uid', uid, 'rc', rc)
  if moved then
    redis.call('HSET', W, uid, ref_of(lane, eid, grp))
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
                                           lane = tostring(lane), grp = m.grp or ''}))
  redis.call('ZADD', DLY[lane + 1], at, uid)
  redis.call('HSET', W, uid, 'p')
  redis.call('ZADD', AL[lane + 1], m.enq, uid)
end

-- Remove a pending entry of ``lane`` (and group) from its stream and the group.
local function drop(lane, eid, grp)
  local s, v = stream_of(lane, grp)
  redis.call('XACK', s, GROUP, eid)
  redis.call('XDEL', s, eid)
  redis.call('ZREM', v, eid)
  settle_group(lane, grp)
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
local function refuse(lane, eid, m, why, now, grp)
  redis.call('XADD', DL, '*', 'id', m.id or eid, 'body', m.body or '',
             'reason', 'not a tidings message: ' .. why, 'rc', '1', 'dead_at', now,
             'enq', now, 'lane', tostring(lane), 'grp', grp or '')
  drop(lane, eid, grp)
end

-- The message leaves the queue for good (acked or dead-lettered).
local function forget(m)
  redis.call('HDEL', F, m.uid)
  redis.call('HDEL', W, m.uid)
  redis.call('ZREM', AL[(m.lane or 0) + 1], m.uid)
  if redis.call('HINCRBY', I, m.id, -1) <= 0 then redis.call('HDEL', I, m.id) end
end

-- Delayed messages that fell due join their lane's (and group's) stream, oldest due
-- first in each lane (every lane's: a lane not asked now is counted ready, and asked
-- later), at most ``moves``.
local function move_due(now, moves)
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
end

-- Up to ``room`` messages of a lane's group ('': the lane's own stream) onto
-- ``taken``: in-flight messages whose visibility timeout passed come back first
-- (claimed again: the delivery count grows, which makes the old receipt stale; oldest
-- enqueued first), then the stream's new entries.
local function take_from(lane, grp, room, now, taken)
  local s, v = stream_of(lane, grp)
  local want = #taken + room
  local back = {}
  for _, eid in ipairs(redis.call('ZRANGEBYSCORE', v, '-inf', now, 'LIMIT', 0, room)) do
    local m = entry(lane, eid, grp)
    if m == nil then
      redis.call('XACK', s, GROUP, eid)
      redis.call('ZREM', v, eid)
    elseif foreign(m) then
      refuse(lane, eid, m, foreign(m), now, grp)
    else
      redis.call('XCLAIM', s, GROUP, CONSUMER, 0, eid)
      m.eid = eid
      m.lane = lane
      m.grp = grp
      m.deliveries = deliveries(lane, eid, grp)
      table.insert(back, m)
    end
  end
  table.sort(back, function(a, b)
    local ea, eb = tonumber(a.enq), tonumber(b.enq)
    if ea ~= eb then return ea < eb end
    return tonumber(a.uid) < tonumber(b.uid)
  end)
  for _, m in ipairs(back) do taken[#taken + 1] = m end
  -- A lane or group with no stream has nothing to read (lane 0's is made, as before
  -- lanes: a foreign writer's entries there are refused).
  if #taken < want and ((lane == 0 and grp == '') or redis.call('EXISTS', s) == 1) then
    if grp == '' then ensure_group(lane) end
    local read = redis.call('XREADGROUP', 'GROUP', GROUP, CONSUMER, 'COUNT', want - #taken,
                            'STREAMS', s, '>')
    if read then
      for _, e in ipairs(read[1][2]) do
        local m = fields_of(e[2])
        local wrong = foreign(m)
        if wrong then
          refuse(lane, e[1], m, wrong, now, grp)
        else
          m.eid = e[1]
          m.lane = lane
          m.grp = grp
          m.deliveries = 1
          table.insert(taken, m)
        end
      end
    end
  end
end

-- Hide what was taken until ``until_at`` (one ZADD a stream, one HMGET for the batch)
-- and answer per message: entry ref, message id, body, enqueued at, receive count,
-- failures, token (the delivery count of the entry), message uid, lane.
local function hand_out(taken, until_at, head)
  local hidden, order, uids = {}, {}, {}
  for _, m in ipairs(taken) do
    local _, v = stream_of(m.lane, m.grp)
    local h = hidden[v]
    if h == nil then
      h = {}
      hidden[v] = h
      order[#order + 1] = v
    end
    h[#h + 1] = until_at
    h[#h + 1] = m.eid
    uids[#uids + 1] = m.uid
  end
  local failures = {}
  if #uids > 0 then
    for _, v in ipairs(order) do call_many('ZADD', v, hidden[v]) end
    for first = 1, #uids, UNPACK do
      local part = redis.call('HMGET', F,
                              unpack(uids, first, math.min(#uids, first + UNPACK - 1)))
      for _, f in ipairs(part) do failures[#failures + 1] = f end
    end
  end
  local out = {head}
  for n, m in ipairs(taken) do
    for _, x in ipairs({ref_of(m.lane, m.eid, m.grp), m.id, m.body, m.enq,
                        tostring(tonumber(m.rc) + m.deliveries), failures[n] or '0',
                        tostring(m.deliveries), m.uid, tostring(m.lane)}) do
      out[#out + 1] = x
    end
  end
  return out
end
