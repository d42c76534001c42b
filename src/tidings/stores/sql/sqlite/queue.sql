-- The embedded transport (tidings.transports.sqlite): per-queue messages with a
-- visibility timeout, and a dead-letter table. A receipt is "<id>:<receive_token>".

-- name: message_insert_many
-- The caller replaces {rows} with one "(?, ?, ?, ?, ?)" group per message (message_id,
-- body, available_at, lane, group_key); the two leading parameters are the queue and
-- enqueued_at.
INSERT INTO messages (queue, enqueued_at, message_id, body, available_at, lane, group_key)
SELECT ?, ?, v.* FROM (VALUES {rows}) AS v

-- name: message_publish_many
-- message_insert_many for a publish from outside admission (a republish, a redrive of
-- an intent's message): each message goes to its intent's lane and group (the lane and
-- group it was published with where the message is not an intent's). The caller
-- replaces {rows} with one "(?, ?, ?, ?, ?)" group per message (message_id, body,
-- available_at, lane, group_key).
INSERT INTO messages (queue, enqueued_at, message_id, body, available_at, lane, group_key)
SELECT ?, ?, v.column1, v.column2, v.column3, coalesce(i.lane, v.column4),
    coalesce(i.group_key, v.column5)
FROM (VALUES {rows}) AS v LEFT JOIN intents i ON i.key = v.column1

-- name: message_insert_keys
-- One message per key of the JSON array :keys, all visible from :available_at: a page
-- of admissions enqueues in one statement, in lane :lane and group :group_key. The body is model.message_body's, built
-- here: :body_head, the key as a JSON string, :body_tail (the caller passes only keys
-- JSON would not escape, so it is the same text to the byte).
INSERT INTO messages (queue, enqueued_at, message_id, body, available_at, lane, group_key)
SELECT :queue, :now, value, :body_head || json_quote(value) || :body_tail, :available_at,
    :lane, :group_key
FROM json_each(:keys)

-- name: queue_next_available
-- When the earliest message of the queue is (or becomes) visible; NULL when empty.
SELECT min(available_at) FROM messages WHERE queue = ?

-- name: message_receive
-- Oldest visible first, in one lane (the caller asks lane by lane, in the worker's
-- order: tidings.core.lanes), of the messages that name no group (a group's are taken
-- by message_receive_group); the receive token fences receipts of earlier receives.
-- :receiver names the receiving worker (NULL: not recorded), for message_release_receiver.
-- Text comes back as bytes: a body that is not UTF-8 must reach the consumer (to be
-- dead-lettered), not fail the whole receive.
UPDATE messages
SET available_at = :visible_at, receive_count = receive_count + 1,
    receive_token = receive_token + 1, leased = 1, receiver = :receiver
WHERE id IN (
    SELECT id FROM messages
    WHERE queue = :queue AND lane = :lane AND group_key = '' AND available_at <= :now
    ORDER BY available_at, id
    LIMIT :limit
)
RETURNING id, CAST(message_id AS BLOB), CAST(body AS BLOB), receive_count, receive_token,
    enqueued_at, failures, lane

-- name: message_has_groups
-- Whether lane :lane holds messages that name a group (one index probe).
SELECT EXISTS (SELECT 1 FROM messages WHERE queue = :queue AND lane = :lane AND group_key > '')

-- name: message_groups_first
-- The groups with messages in a lane (tidings.core.fair), in key order from the first
-- ('' first: the messages that name none), at most :limit: a walk of messages_ready that
-- jumps from one group to the next (one probe a group, however many messages it holds).
WITH RECURSIVE walk(group_key, n) AS (
    SELECT (SELECT min(group_key) FROM messages WHERE queue = :queue AND lane = :lane), 1
    UNION ALL
    SELECT (SELECT m.group_key FROM messages m
            WHERE m.queue = :queue AND m.lane = :lane AND m.group_key > walk.group_key
            ORDER BY m.group_key LIMIT 1), n + 1
    FROM walk WHERE walk.group_key IS NOT NULL AND n < :limit
)
SELECT group_key FROM walk WHERE group_key IS NOT NULL

-- name: message_groups
-- message_groups_first after the group :after.
WITH RECURSIVE walk(group_key, n) AS (
    SELECT (SELECT group_key FROM messages
            WHERE queue = :queue AND lane = :lane AND group_key > :after
            ORDER BY group_key LIMIT 1), 1
    UNION ALL
    SELECT (SELECT m.group_key FROM messages m
            WHERE m.queue = :queue AND m.lane = :lane AND m.group_key > walk.group_key
            ORDER BY m.group_key LIMIT 1), n + 1
    FROM walk WHERE walk.group_key IS NOT NULL AND n < :limit
)
SELECT group_key FROM walk WHERE group_key IS NOT NULL

-- name: message_receive_group
-- message_receive for one group of a lane (fair share), oldest visible first.
UPDATE messages
SET available_at = :visible_at, receive_count = receive_count + 1,
    receive_token = receive_token + 1, leased = 1, receiver = :receiver
WHERE id IN (
    SELECT id FROM messages
    WHERE queue = :queue AND lane = :lane AND group_key = :group AND available_at <= :now
    ORDER BY available_at, id
    LIMIT :limit
)
RETURNING id, CAST(message_id AS BLOB), CAST(body AS BLOB), receive_count, receive_token,
    enqueued_at, failures, lane

-- name: message_ack
-- By id alone: whoever acks has finished the work, even under a stale receipt.
-- :ids is a JSON array of row ids. The unary + keeps the planner on the row ids instead
-- of walking the whole queue through messages_ready.
DELETE FROM messages WHERE +queue = :queue AND id IN (SELECT value FROM json_each(:ids))

-- name: message_nack
UPDATE messages SET available_at = ?, leased = 0
WHERE queue = ? AND id = ? AND receive_token = ?

-- name: message_nack_failed
-- A nack that counts a failure on the message itself (see messages.failures).
UPDATE messages SET available_at = ?, leased = 0, failures = failures + 1
WHERE queue = ? AND id = ? AND receive_token = ?

-- name: message_extend
UPDATE messages SET available_at = ?, leased = 1
WHERE queue = ? AND id = ? AND receive_token = ?

-- name: message_dead_letter_copy
-- With its lane and group: a redrive of a message that is no intent's goes back there.
INSERT INTO dead_letters (queue, message_id, body, reason, receive_count, dead_at, lane,
                          group_key)
SELECT queue, message_id, body, ?, receive_count, ?, lane, group_key
FROM messages
WHERE queue = ? AND id = ? AND receive_token = ?

-- name: message_dead_letter_delete
DELETE FROM messages WHERE queue = ? AND id = ? AND receive_token = ?

-- name: dead_letter_list
-- Text as bytes, as in message_receive: a poison body must not hide the list.
SELECT id, queue, CAST(message_id AS BLOB), CAST(body AS BLOB), CAST(reason AS BLOB),
    receive_count, dead_at
FROM dead_letters
WHERE queue = ?
ORDER BY dead_at, id
LIMIT ?

-- name: dead_letter_redrive_copy
-- Back on the queue as a fresh message: visible now, never received, in its intent's
-- lane and group (a message that is no intent's: the lane and group it died in).
INSERT INTO messages (queue, message_id, body, available_at, enqueued_at, lane, group_key)
SELECT queue, message_id, body, :now, :now,
    coalesce((SELECT i.lane FROM intents i WHERE i.key = dead_letters.message_id), lane),
    coalesce((SELECT i.group_key FROM intents i WHERE i.key = dead_letters.message_id),
             group_key)
FROM dead_letters
WHERE +queue = :queue AND id IN (SELECT value FROM json_each(:ids))
ORDER BY id

-- name: dead_letter_redrive_delete
DELETE FROM dead_letters WHERE +queue = :queue AND id IN (SELECT value FROM json_each(:ids))

-- name: queue_depth
SELECT
    coalesce(sum(available_at <= :now), 0),
    coalesce(sum(available_at > :now AND leased = 0), 0),
    coalesce(sum(available_at > :now AND leased = 1), 0),
    min(enqueued_at)
FROM messages
WHERE queue = :queue

-- name: queue_depth_lanes
-- Each lane holding messages: ready now, all, and the oldest's enqueue time (the ready
-- index covers the lane and the visibility).
SELECT lane, coalesce(sum(available_at <= :now), 0), count(*), min(enqueued_at)
FROM messages
WHERE queue = :queue
GROUP BY lane
ORDER BY lane

-- name: queue_depth_groups
-- The groups holding the most messages, the largest first: ready now and all (the ready
-- index covers the lane, the group and the visibility).
SELECT lane, group_key, coalesce(sum(available_at <= :now), 0), count(*)
FROM messages
WHERE queue = :queue AND group_key <> ''
GROUP BY lane, group_key
ORDER BY count(*) DESC, lane, group_key
LIMIT :limit

-- name: dead_letter_count
SELECT count(*) FROM dead_letters WHERE queue = ?

-- name: message_contains
-- :ids is a JSON array of message ids; + keeps the planner on messages_message_id.
SELECT DISTINCT message_id FROM messages
WHERE +queue = :queue AND message_id IN (SELECT value FROM json_each(:ids))

-- name: message_release_receiver
-- The messages a gone worker holds hidden, visible again now; the token moves on, so
-- the gone worker's receipts are fenced (its nack and extend are ignored). A full scan:
-- this runs once per worker that died, never on the hot path.
UPDATE messages
SET available_at = :now, leased = 0, receiver = NULL, receive_token = receive_token + 1
WHERE receiver = :receiver AND leased = 1 AND available_at > :now
RETURNING queue
