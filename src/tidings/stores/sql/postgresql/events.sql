-- The append-only audit trail.

-- name: event_insert
INSERT INTO events (key, channel, type, at, state, attempt, worker, message_id,
                    provider_request_id, detail)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)

-- name: event_insert_keys
-- One event of the same type, channel and attempt for each key of the array %(keys)s,
-- in array order: admission writes a whole page of events in one statement this way.
INSERT INTO events (key, channel, type, at, state, attempt)
SELECT k.key, %(channel)s, %(type)s, %(at)s::float8, %(state)s, %(attempt)s::int
FROM unnest(%(keys)s::text[]) WITH ORDINALITY AS k(key, n)
ORDER BY k.n

-- name: events_for
SELECT key, channel, type, at, state, attempt, worker, message_id, provider_request_id, detail
FROM events
WHERE key = %s
ORDER BY id

-- name: event_counts
SELECT channel, type, count(*)::int FROM events GROUP BY channel, type
