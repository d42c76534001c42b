-- The append-only audit trail.

-- name: event_insert
INSERT INTO events (key, channel, type, at, state, attempt, worker, message_id,
                    provider_request_id, detail)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)

-- name: event_insert_columns
-- Many events in one statement (a worker's batch of claims or outcomes leaves one event
-- each): its one parameter is a JSON array of the rows, each an array of the ten
-- columns in order. json.dumps encodes a batch in C where psycopg adapts a list per
-- column element by element in Python (5.1 us against 1.2 us of client CPU an event of
-- a batch of 200). jsonb, not json: json's ->> parses a row's text again at every field
-- it reads. The rows keep the array's order, so ids follow it.
INSERT INTO events (key, channel, type, at, state, attempt, worker, message_id,
                    provider_request_id, detail)
SELECT r->>0, r->>1, r->>2, (r->>3)::float8, r->>4, (r->>5)::int, r->>6, r->>7, r->>8,
       r->>9
FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(r, ord)
ORDER BY ord

-- name: events_for
SELECT key, channel, type, at, state, attempt, worker, message_id, provider_request_id, detail
FROM events
WHERE key = %s
ORDER BY id

-- name: event_counts
SELECT channel, type, count(*)::int FROM events GROUP BY channel, type
