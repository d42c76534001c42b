-- The append-only audit trail.

-- name: event_insert
INSERT INTO events (key, channel, type, at, state, attempt, worker, message_id,
                    provider_request_id, detail)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)

-- name: event_insert_columns
-- Many events in one statement, one array per column (a worker's batch of claims or
-- outcomes leaves one event each): the rows keep the arrays' order, so ids follow it.
INSERT INTO events (key, channel, type, at, state, attempt, worker, message_id,
                    provider_request_id, detail)
SELECT key, channel, type, at, state, attempt, worker, message_id, provider_request_id,
       detail
FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[], %s::text[], %s::int[],
            %s::text[], %s::text[], %s::text[], %s::text[])
     WITH ORDINALITY AS e(key, channel, type, at, state, attempt, worker, message_id,
                          provider_request_id, detail, ord)
ORDER BY ord

-- name: events_for
SELECT key, channel, type, at, state, attempt, worker, message_id, provider_request_id, detail
FROM events
WHERE key = %s
ORDER BY id

-- name: event_counts
SELECT channel, type, count(*)::int FROM events GROUP BY channel, type
