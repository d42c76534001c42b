-- Shared by every script (prepended when loaded). Keys of one queue, in this order:
-- KEYS[1] stream   the ready and in-flight messages (consumer group "tidings")
-- KEYS[2] vis      sorted set: in-flight stream entry id -> visible again at (caller's clock)
-- KEYS[3] delayed  sorted set: message uid -> visible at (delayed publishes and nacks)
-- KEYS[4] parked   hash: message uid -> the delayed message (JSON of strings)
-- KEYS[5] failures hash: message uid -> failures counted by failed nacks
-- KEYS[6] ids      hash: message id -> copies on the queue (contains)
-- KEYS[7] ages     sorted set: message uid -> enqueued at, for a message out of its
--                  place in enqueue order (parked, nacked back to the tail); a fresh
--                  entry's age is its own field: the oldest message is the older of
--                  the stream's first entry and this set's first
-- KEYS[8] dead     stream of dead letters with their reason
-- KEYS[9] seq      counter of message uids
-- KEYS[10] where   hash: message uid -> its stream entry id, or 'p' while parked; only
--                  for a message that moved (nacked, parked): a message absent from it
--                  is still at the entry it was published as (publish writes no field)
local S, V, D, P, F, I, A, DL, SEQ, W =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local GROUP = 'tidings'
local CONSUMER = 'tidings'

local function ensure_group()
  local ok = redis.pcall('XGROUP', 'CREATE', S, GROUP, '0', 'MKSTREAM')
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
local function entry(eid)
  local found = redis.call('XRANGE', S, eid, eid)
  if #found == 0 then return nil end
  return fields_of(found[1][2])
end

-- How many times the group delivered the pending entry (nil when not pending).
local function deliveries(eid)
  local p = redis.call('XPENDING', S, GROUP, eid, eid, 1)
  if #p == 0 then return nil end
  return tonumber(p[1][4])
end

-- The entry when ``token`` is still its delivery count and it is in flight (a stale
-- receipt gets nil).
local function held(eid, token)
  if not redis.call('ZSCORE', V, eid) then return nil end
  local count = deliveries(eid)
  if count == nil or tostring(count) ~= token then return nil end
  local m = entry(eid)
  if m == nil then return nil end
  m.deliveries = count
  return m
end

-- A new entry for the message. A ``moved`` one (nacked, or parked until now) records
-- where it went and its age; a fresh one is found at its receipt's entry and is in
-- enqueue order at the stream's tail.
local function append(m, uid, rc, moved)
  local eid = redis.call('XADD', S, '*', 'id', m.id, 'body', m.body, 'enq', m.enq, 'uid', uid,
                         'rc', rc)
  if moved then
    redis.call('HSET', W, uid, eid)
    redis.call('ZADD', A, m.enq, uid)
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

-- Park a message until ``at`` (a delayed publish, a nack with a delay).
local function park(m, uid, rc, at)
  redis.call('HSET', P, uid, cjson.encode({id = m.id, body = m.body, enq = m.enq, rc = rc}))
  redis.call('ZADD', D, at, uid)
  redis.call('HSET', W, uid, 'p')
  redis.call('ZADD', A, m.enq, uid)
end

-- Remove a pending entry from the stream and the group.
local function drop(eid)
  redis.call('XACK', S, GROUP, eid)
  redis.call('XDEL', S, eid)
  redis.call('ZREM', V, eid)
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
local function refuse(eid, m, why, now)
  redis.call('XADD', DL, '*', 'id', m.id or eid, 'body', m.body or '',
             'reason', 'not a tidings message: ' .. why, 'rc', '1', 'dead_at', now,
             'enq', now)
  drop(eid)
end

-- The message leaves the queue for good (acked or dead-lettered).
local function forget(m)
  redis.call('HDEL', F, m.uid)
  redis.call('HDEL', W, m.uid)
  redis.call('ZREM', A, m.uid)
  if redis.call('HINCRBY', I, m.id, -1) <= 0 then redis.call('HDEL', I, m.id) end
end
