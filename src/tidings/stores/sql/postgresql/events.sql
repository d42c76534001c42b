-- The append-only audit trail.

-- name: event_insert
INSERT INTO events (key, channel, type, at, state, attempt, worker, message_id,
                    provider_request_id, detail)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)

-- name: events_for
SELECT key, channel, type, at, state, attempt, worker, message_id, provider_request_id, detail
FROM events
WHERE key = %s
ORDER BY id

-- name: event_counts
SELECT channel, type, count(*)::int FROM events GROUP BY channel, type
