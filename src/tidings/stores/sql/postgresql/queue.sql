-- The embedded transport (tidings.transports.postgres): per-queue messages with a
-- visibility timeout, and a dead-letter table. A receipt is "<id>:<receive_token>".

-- name: message_insert_many
-- One array per column, unnested in publish order (ids grow in that order). The
-- notification wakes idle consumers of the queue in every process once the
-- transaction commits (never before; none on rollback). %(lanes)s: each message's
-- lane; NULL for a message to go to its intent's lane and group (a republish; a
-- message that is no intent's: its lane of %(own_lanes)s, its group of
-- %(own_groups)s).
WITH inserted AS (
    INSERT INTO messages (queue, enqueued_at, message_id, body, available_at, lane,
                          group_key)
    SELECT %(queue)s, %(now)s::float8, m.message_id, m.body, m.available_at,
           coalesce(m.lane, i.lane, m.own_lane, 0), coalesce(i.group_key, m.own_group, '')
    FROM unnest(%(message_ids)s::text[], %(bodies)s::text[], %(available)s::float8[],
                %(lanes)s::smallint[], %(own_lanes)s::smallint[], %(own_groups)s::text[])
         WITH ORDINALITY AS m(message_id, body, available_at, lane, own_lane, own_group, n)
    LEFT JOIN intents i ON m.lane IS NULL AND i.key = m.message_id
    ORDER BY m.n
    RETURNING 1
)
SELECT pg_notify('tidings_ready', current_schema() || ':' || %(queue)s)
WHERE EXISTS (SELECT 1 FROM inserted)

-- name: queue_notify
-- Wake idle consumers of a queue (after a redrive or a release), at commit.
SELECT pg_notify('tidings_ready', current_schema() || ':' || %(queue)s)

-- name: queue_next_available
-- When the earliest message of the queue is (or becomes) visible; NULL when empty.
SELECT min(available_at) FROM messages WHERE queue = %(queue)s

-- name: listen_ready
LISTEN tidings_ready

-- name: listen_schema
SELECT current_schema()

-- name: message_receive
-- Lane by lane in the order of %(lanes)s (tidings.core.lanes), oldest visible first in
-- each, of the messages that name no group (a group's are taken by
-- message_receive_groups): a lateral subquery per lane, each an index range of
-- messages_ready, and no lane is read once the limit is reached. SKIP LOCKED: concurrent receivers on any
-- machine take disjoint batches instead of waiting on each other's rows. The receive
-- token fences receipts of earlier receives. %(receiver)s names the receiving worker
-- (NULL: not recorded), for message_release_receiver.
-- A receive only hides messages for a while, so its commit does not wait for the WAL
-- flush (synchronous_commit off, for this statement's transaction alone): a server
-- crash that forgot it makes them visible again, which at-least-once delivery and the
-- ledger's claims already handle, and the worker's next durable commit (its claim)
-- flushes the WAL past it anyway. Set in RETURNING, row by row, so that the plan of
-- the receive is the plan it had (a receive that takes nothing writes no WAL).
UPDATE messages
SET available_at = %(visible_at)s, receive_count = receive_count + 1,
    receive_token = receive_token + 1, leased = true, receiver = %(receiver)s
WHERE id IN (
    SELECT m.id
    FROM unnest(%(lanes)s::smallint[]) AS l(lane)
    CROSS JOIN LATERAL (
        SELECT id FROM messages
        WHERE queue = %(queue)s AND lane = l.lane AND group_key = ''
          AND available_at <= %(now)s
        ORDER BY available_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS m
    LIMIT %(limit)s
)
RETURNING id, message_id, body, receive_count, receive_token, enqueued_at, failures,
    lane, set_config('synchronous_commit', 'off', true)

-- name: message_has_groups
-- Whether any lane of %(lanes)s holds messages that name a group: one index probe a
-- lane (a queue that never names one answers at once).
SELECT EXISTS (
    SELECT 1 FROM unnest(%(lanes)s::smallint[]) AS l(lane)
    WHERE EXISTS (SELECT 1 FROM messages
                  WHERE queue = %(queue)s AND lane = l.lane AND group_key > '')
)

-- name: message_groups_first
-- The groups with messages in a lane (tidings.core.fair), in key order from the first
-- ('' first: the messages that name none), at most %(limit)s: a walk of messages_ready
-- that jumps from one group to the next (one probe a group, however many it holds).
WITH RECURSIVE walk(group_key, n) AS (
    SELECT (SELECT min(group_key) FROM messages
            WHERE queue = %(queue)s AND lane = %(lane)s), 1
    UNION ALL
    SELECT (SELECT m.group_key FROM messages m
            WHERE m.queue = %(queue)s AND m.lane = %(lane)s AND m.group_key > walk.group_key
            ORDER BY m.group_key LIMIT 1), n + 1
    FROM walk WHERE walk.group_key IS NOT NULL AND n < %(limit)s
)
SELECT group_key FROM walk WHERE group_key IS NOT NULL

-- name: message_groups
-- message_groups_first after the group %(after)s.
WITH RECURSIVE walk(group_key, n) AS (
    SELECT (SELECT group_key FROM messages
            WHERE queue = %(queue)s AND lane = %(lane)s AND group_key > %(after)s
            ORDER BY group_key LIMIT 1), 1
    UNION ALL
    SELECT (SELECT m.group_key FROM messages m
            WHERE m.queue = %(queue)s AND m.lane = %(lane)s AND m.group_key > walk.group_key
            ORDER BY m.group_key LIMIT 1), n + 1
    FROM walk WHERE walk.group_key IS NOT NULL AND n < %(limit)s
)
SELECT group_key FROM walk WHERE group_key IS NOT NULL

-- name: message_receive_groups
-- message_receive for a lane shared among groups (fair share): each group of
-- %(groups)s takes at most its paired share of %(shares)s, oldest visible first, SKIP
-- LOCKED, each an index range of messages_ready.
UPDATE messages
SET available_at = %(visible_at)s, receive_count = receive_count + 1,
    receive_token = receive_token + 1, leased = true, receiver = %(receiver)s
WHERE id IN (
    SELECT m.id
    FROM unnest(%(groups)s::text[], %(shares)s::int[]) AS g(group_key, share)
    CROSS JOIN LATERAL (
        SELECT id FROM messages
        WHERE queue = %(queue)s AND lane = %(lane)s AND group_key = g.group_key
          AND available_at <= %(now)s
        ORDER BY available_at, id
        LIMIT g.share
        FOR UPDATE SKIP LOCKED
    ) AS m
)
RETURNING id, message_id, body, receive_count, receive_token, enqueued_at, failures,
    lane, group_key, set_config('synchronous_commit', 'off', true)

-- name: message_ack
-- By id alone: whoever acks has finished the work, even under a stale receipt.
DELETE FROM messages WHERE queue = %(queue)s AND id = ANY(%(ids)s::bigint[])

-- name: message_nack
UPDATE messages SET available_at = r.available_at, leased = false
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(available)s::float8[])
     AS r(id, token, available_at)
WHERE messages.queue = %(queue)s AND messages.id = r.id AND messages.receive_token = r.token

-- name: message_nack_failed
-- A nack that counts a failure on the message itself (see messages.failures).
UPDATE messages SET available_at = r.available_at, leased = false,
    failures = messages.failures + 1
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(available)s::float8[])
     AS r(id, token, available_at)
WHERE messages.queue = %(queue)s AND messages.id = r.id AND messages.receive_token = r.token

-- name: message_extend
UPDATE messages SET available_at = %(available)s, leased = true
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS r(id, token)
WHERE messages.queue = %(queue)s AND messages.id = r.id AND messages.receive_token = r.token

-- name: message_dead_letter
-- Move fenced messages to the dead letters in one statement.
WITH moved AS (
    DELETE FROM messages
    USING unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(reasons)s::text[])
          AS r(id, token, reason)
    WHERE messages.queue = %(queue)s AND messages.id = r.id
      AND messages.receive_token = r.token
    RETURNING messages.id, messages.queue, messages.message_id, messages.body, r.reason,
              messages.receive_count, messages.lane, messages.group_key
)
INSERT INTO dead_letters (queue, message_id, body, reason, receive_count, dead_at, lane,
                          group_key)
SELECT queue, message_id, body, reason, receive_count, %(now)s, lane, group_key
FROM moved ORDER BY id

-- name: dead_letter_list
SELECT id, queue, message_id, body, reason, receive_count, dead_at
FROM dead_letters
WHERE queue = %s
ORDER BY dead_at, id
LIMIT %s

-- name: dead_letter_redrive
-- Back on the queue as fresh messages: visible now, never received, each in its
-- intent's lane and group (a message that is no intent's: the lane and group it died in).
WITH moved AS (
    DELETE FROM dead_letters
    WHERE queue = %(queue)s AND id = ANY(%(ids)s::bigint[])
    RETURNING id, queue, message_id, body, lane, group_key
)
INSERT INTO messages (queue, message_id, body, available_at, enqueued_at, lane, group_key)
SELECT moved.queue, moved.message_id, moved.body, %(now)s, %(now)s,
       coalesce(i.lane, moved.lane), coalesce(i.group_key, moved.group_key)
FROM moved LEFT JOIN intents i ON i.key = moved.message_id ORDER BY moved.id

-- name: queue_depth
SELECT
    count(*) FILTER (WHERE available_at <= %(now)s)::int,
    count(*) FILTER (WHERE available_at > %(now)s AND NOT leased)::int,
    count(*) FILTER (WHERE available_at > %(now)s AND leased)::int,
    min(enqueued_at),
    (SELECT count(*) FROM dead_letters WHERE queue = %(queue)s)::int
FROM messages
WHERE queue = %(queue)s

-- name: queue_depth_lanes
-- Each lane holding messages: ready now, all, and the oldest's enqueue time.
SELECT lane, count(*) FILTER (WHERE available_at <= %(now)s)::int, count(*)::int,
    min(enqueued_at)
FROM messages
WHERE queue = %(queue)s
GROUP BY lane
ORDER BY lane

-- name: queue_depth_groups
-- The groups holding the most messages, the largest first: ready now and all.
SELECT lane, group_key, count(*) FILTER (WHERE available_at <= %(now)s)::int, count(*)::int
FROM messages
WHERE queue = %(queue)s AND group_key <> ''
GROUP BY lane, group_key
ORDER BY count(*) DESC, lane, group_key
LIMIT %(limit)s

-- name: message_contains
SELECT DISTINCT message_id FROM messages
WHERE queue = %(queue)s AND message_id = ANY(%(ids)s::text[])

-- name: message_release_receiver
-- The messages a gone worker holds hidden, visible again now, with a ready notification
-- per queue; the token moves on, so the gone worker's receipts are fenced (its nack and
-- extend are ignored). A full scan: this runs once per worker that died, never on the
-- hot path.
WITH released AS (
    UPDATE messages
    SET available_at = %(now)s, leased = false, receiver = NULL,
        receive_token = receive_token + 1
    WHERE receiver = %(receiver)s AND leased AND available_at > %(now)s
    RETURNING queue
)
SELECT queue, count(*)::int, pg_notify('tidings_ready', current_schema() || ':' || queue)
FROM released GROUP BY queue
