-- The operator API: tokens, the trigger replay guard and log, publish idempotency, and
-- the read-only summaries behind status, plan, metrics and timelines.

-- name: api_token_insert
INSERT INTO api_tokens (id, name, scopes, secret_hash, created_at, revoked_at,
                        expires_at)
VALUES (:id, :name, :scopes, :secret_hash, :created_at, :revoked_at, :expires_at)

-- name: api_token_get
SELECT id, name, scopes, secret_hash, created_at, revoked_at, expires_at FROM api_tokens
WHERE id = ?

-- name: api_token_list
SELECT id, name, scopes, secret_hash, created_at, revoked_at, expires_at FROM api_tokens
ORDER BY created_at, id

-- name: api_token_revoke
-- The first revocation's time is kept: revoking twice is a no-op.
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, :now) WHERE id = :id
RETURNING id, name, scopes, secret_hash, created_at, revoked_at, expires_at

-- name: api_signature_prune
DELETE FROM api_signatures WHERE expires_at <= :now

-- name: api_signature_insert
INSERT INTO api_signatures (signature, expires_at) VALUES (:signature, :expires_at)
ON CONFLICT (signature) DO NOTHING

-- name: api_trigger_record
INSERT INTO api_triggers (campaign, logical_date, count, first_at, last_at)
VALUES (:campaign, :logical_date, 1, :now, :now)
ON CONFLICT (campaign, logical_date) DO UPDATE
SET count = api_triggers.count + 1, last_at = excluded.last_at
RETURNING count

-- name: api_trigger_counts
SELECT campaign, sum(count) FROM api_triggers GROUP BY campaign ORDER BY campaign

-- name: api_idempotency_get
SELECT key, request_hash, status, body, created_at FROM api_idempotency WHERE key = ?

-- name: api_idempotency_get_many
-- The records of several keys at once (concurrent publishes share one read).
SELECT key, request_hash, status, body, created_at FROM api_idempotency
WHERE key IN (SELECT value FROM json_each(:keys))

-- name: api_idempotency_prune
DELETE FROM api_idempotency WHERE created_at < :before

-- name: api_idempotency_insert
INSERT INTO api_idempotency (key, request_hash, status, body, created_at)
VALUES (:key, :request_hash, :status, :body, :created_at)
ON CONFLICT (key) DO NOTHING

-- name: api_idempotency_finish
-- A reservation (status 0) of this request becomes its answer.
UPDATE api_idempotency SET status = :status, body = :body
WHERE key = :key AND request_hash = :request_hash AND status = 0

-- name: api_idempotency_insert_many
-- Reservations of a group of publishes (POST /v1/queue/publish, group commit), from the
-- JSON array :rows of [key, request_hash]; the rows inserted come back. A key twice in
-- the group keeps its first row.
INSERT INTO api_idempotency (key, request_hash, status, body, created_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), 0, '', :created_at
FROM json_each(:rows) WHERE true
ON CONFLICT (key) DO NOTHING
RETURNING key, request_hash

-- name: api_idempotency_finish_many
-- The reservations of a group become their answers, from the JSON array :rows of
-- [key, request_hash, status, body].
UPDATE api_idempotency SET status = r.status, body = r.body
FROM (SELECT json_extract(value, '$[0]') AS key, json_extract(value, '$[1]') AS request_hash,
             json_extract(value, '$[2]') AS status, json_extract(value, '$[3]') AS body
      FROM json_each(:rows)) AS r
WHERE api_idempotency.key = r.key AND api_idempotency.request_hash = r.request_hash
  AND api_idempotency.status = 0

-- name: api_idempotency_release
DELETE FROM api_idempotency
WHERE key = :key AND request_hash = :request_hash AND status = 0

-- name: intent_summary
-- One row per (campaign, channel); campaign is NULL for one-off intents. "Backlog" is
-- live work already due (parked work included: a release puts it back on the queue);
-- "scheduled" is live work due later. One scan of the ledger.
SELECT campaign, channel,
       count(*) AS total,
       count(*) FILTER (WHERE state IN ('selected', 'enqueued', 'claimed', 'retryable',
                                        'uncertain', 'parked') AND due_at <= :now) AS backlog,
       count(*) FILTER (WHERE state IN ('selected', 'enqueued', 'claimed', 'retryable',
                                        'uncertain', 'parked') AND due_at > :now) AS scheduled,
       count(*) FILTER (WHERE state = 'claimed') AS claimed,
       count(*) FILTER (WHERE state = 'retryable') AS retryable,
       count(*) FILTER (WHERE state = 'uncertain') AS uncertain,
       count(*) FILTER (WHERE state IN ('accepted', 'delivered', 'bounced', 'complained'))
           AS accepted,
       count(*) FILTER (WHERE state IN ('accepted', 'delivered', 'bounced', 'complained')
                        AND (expires_at IS NULL OR accepted_at <= expires_at))
           AS accepted_in_time,
       count(*) FILTER (WHERE accepted_at >= :since) AS accepted_recent,
       count(*) FILTER (WHERE state = 'expired') AS expired,
       count(*) FILTER (WHERE state = 'dead') AS dead,
       count(*) FILTER (WHERE state = 'rejected') AS rejected,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE state = 'suppressed') AS suppressed,
       count(*) FILTER (WHERE state = 'throttled') AS throttled,
       count(*) FILTER (WHERE state IN ('selected', 'enqueued', 'claimed', 'retryable',
                                        'uncertain', 'parked') AND expires_at <= :now) AS overdue,
       min(CASE WHEN state IN ('selected', 'enqueued', 'claimed', 'retryable', 'uncertain',
                        'parked')
                 AND due_at <= :now THEN due_at END) AS oldest_due_at,
       min(CASE WHEN state IN ('selected', 'enqueued', 'claimed', 'retryable', 'uncertain',
                        'parked')
                THEN expires_at END) AS earliest_expiry
FROM intents
GROUP BY campaign, channel
ORDER BY campaign, channel

-- name: intent_latency_histogram
-- Seconds from due to acceptance, counted per channel into the buckets of the JSON array
-- :bounds (ascending upper bounds); bucket NULL is beyond the last bound.
SELECT channel,
       (SELECT min(b.key) FROM json_each(:bounds) AS b
        WHERE i.accepted_at - i.due_at <= b.value) AS bucket,
       count(*), sum(max(i.accepted_at - i.due_at, 0.0))
FROM intents AS i
WHERE accepted_at IS NOT NULL
GROUP BY channel, bucket

-- name: intent_find_by_recipient
-- An operator's look-up, by intents_recipient (migration 0020).
SELECT key, channel, recipient_id, address, template, data, campaign, occurrence, state,
       due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
       finished_at, attempts, failures, lease_owner, lease_token, lease_expires_at,
       next_attempt_at, receipt, provider_request_id, disposition, reason, cancel_requested,
       lane, group_key
FROM intents
WHERE recipient_id = :recipient_id
ORDER BY due_at DESC, key
LIMIT :limit

-- name: event_keys_by_detail
-- Keys whose events carry :detail (a recipient surrogate on send outcomes); a scan: a
-- look-up by a surrogate read in a log line, rare enough not to cost every event an
-- index entry.
SELECT key FROM events WHERE detail = :detail GROUP BY key ORDER BY max(id) DESC LIMIT :limit
