-- The append-only audit trail.

-- name: event_insert
INSERT INTO events (key, channel, type, at, state, attempt, worker, message_id,
                    provider_request_id, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: event_insert_keys
-- One event of the same type, channel and attempt for each key of the JSON array :keys:
-- admission and enqueue write a whole page of events in one statement this way.
INSERT INTO events (key, channel, type, at, state, attempt)
SELECT value, :channel, :type, :at, :state, :attempt FROM json_each(:keys)

-- name: events_for
SELECT key, channel, type, at, state, attempt, worker, message_id, provider_request_id, detail
FROM events
WHERE key = ?
ORDER BY id

-- name: event_counts
SELECT channel, type, count(*) FROM events GROUP BY channel, type
