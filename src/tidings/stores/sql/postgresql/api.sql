-- The operator API: tokens, the trigger replay guard and log, publish idempotency, and
-- the read-only summaries behind status, plan, metrics and timelines.

-- name: api_token_insert
INSERT INTO api_tokens (id, name, scopes, secret_hash, created_at, revoked_at,
                        expires_at)
VALUES (%(id)s, %(name)s, %(scopes)s, %(secret_hash)s, %(created_at)s, %(revoked_at)s,
        %(expires_at)s)

-- name: api_token_get
SELECT id, name, scopes, secret_hash, created_at, revoked_at, expires_at FROM api_tokens
WHERE id = %s

-- name: api_token_list
SELECT id, name, scopes, secret_hash, created_at, revoked_at, expires_at FROM api_tokens
ORDER BY created_at, id

-- name: api_token_revoke
-- The first revocation's time is kept: revoking twice is a no-op.
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, %(now)s) WHERE id = %(id)s
RETURNING id, name, scopes, secret_hash, created_at, revoked_at, expires_at

-- name: api_signature_prune
DELETE FROM api_signatures WHERE expires_at <= %(now)s

-- name: api_signature_insert
INSERT INTO api_signatures (signature, expires_at) VALUES (%(signature)s, %(expires_at)s)
ON CONFLICT (signature) DO NOTHING

-- name: api_trigger_record
INSERT INTO api_triggers (campaign, logical_date, count, first_at, last_at)
VALUES (%(campaign)s, %(logical_date)s, 1, %(now)s, %(now)s)
ON CONFLICT (campaign, logical_date) DO UPDATE
SET count = api_triggers.count + 1, last_at = excluded.last_at
RETURNING count

-- name: api_trigger_counts
SELECT campaign, sum(count)::int FROM api_triggers GROUP BY campaign ORDER BY campaign

-- name: api_idempotency_get
SELECT key, request_hash, status, body, created_at FROM api_idempotency WHERE key = %s

-- name: api_idempotency_get_many
-- The records of several keys at once (concurrent publishes share one read).
-- The arrays of this and the group writes below are sent in binary (the b
-- placeholders): psycopg's text form escapes them element by element, some twenty
-- times the CPU for a group's keys and answers.
SELECT key, request_hash, status, body, created_at FROM api_idempotency
WHERE key = ANY(%(keys)b::text[])

-- name: api_idempotency_prune
DELETE FROM api_idempotency WHERE created_at < %(before)s

-- name: api_idempotency_insert
INSERT INTO api_idempotency (key, request_hash, status, body, created_at)
VALUES (%(key)s, %(request_hash)s, %(status)s, %(body)s, %(created_at)s)
ON CONFLICT (key) DO NOTHING

-- name: api_idempotency_finish
-- A reservation (status 0) of this request becomes its answer.
UPDATE api_idempotency SET status = %(status)s, body = %(body)s
WHERE key = %(key)s AND request_hash = %(request_hash)s AND status = 0

-- name: api_idempotency_insert_many
-- Reservations of a group of publishes (POST /v1/queue/publish, group commit): the rows
-- this transaction inserted come back. A key twice in the group keeps its first row;
-- ON CONFLICT waits for a concurrent insert of a key and then skips it.
INSERT INTO api_idempotency (key, request_hash, status, body, created_at)
SELECT r.key, r.request_hash, 0, '', %(created_at)s
FROM unnest(%(keys)b::text[], %(hashes)b::text[]) WITH ORDINALITY AS r(key, request_hash, n)
ORDER BY r.n
ON CONFLICT (key) DO NOTHING
RETURNING key, request_hash

-- name: api_idempotency_finish_many
-- The reservations of a group become their answers (one status and body each).
UPDATE api_idempotency AS a SET status = r.status, body = r.body
FROM unnest(%(keys)b::text[], %(hashes)b::text[], %(statuses)b::int[], %(bodies)b::text[])
     AS r(key, request_hash, status, body)
WHERE a.key = r.key AND a.request_hash = r.request_hash AND a.status = 0

-- name: api_idempotency_release
DELETE FROM api_idempotency
WHERE key = %(key)s AND request_hash = %(request_hash)s AND status = 0

-- name: intent_summary
-- One row per (campaign, channel); campaign is NULL for one-off intents. "Backlog" is
-- live work already due (parked work included: a release puts it back on the queue);
-- "scheduled" is live work due later. One scan of the ledger.
SELECT campaign, channel,
       count(*)::int AS total,
       (count(*) FILTER (WHERE state IN ('selected', 'enqueued', 'claimed', 'retryable',
                                         'uncertain', 'parked') AND due_at <= %(now)s))::int AS backlog,
       (count(*) FILTER (WHERE state IN ('selected', 'enqueued', 'claimed', 'retryable',
                                         'uncertain', 'parked') AND due_at > %(now)s))::int AS scheduled,
       (count(*) FILTER (WHERE state = 'claimed'))::int AS claimed,
       (count(*) FILTER (WHERE state = 'retryable'))::int AS retryable,
       (count(*) FILTER (WHERE state = 'uncertain'))::int AS uncertain,
       (count(*) FILTER (WHERE state IN ('accepted', 'delivered', 'bounced',
                                         'complained')))::int AS accepted,
       (count(*) FILTER (WHERE state IN ('accepted', 'delivered', 'bounced', 'complained')
                         AND (expires_at IS NULL OR accepted_at <= expires_at)))::int
           AS accepted_in_time,
       (count(*) FILTER (WHERE accepted_at >= %(since)s))::int AS accepted_recent,
       (count(*) FILTER (WHERE state = 'expired'))::int AS expired,
       (count(*) FILTER (WHERE state = 'dead'))::int AS dead,
       (count(*) FILTER (WHERE state = 'rejected'))::int AS rejected,
       (count(*) FILTER (WHERE state = 'cancelled'))::int AS cancelled,
       (count(*) FILTER (WHERE state = 'suppressed'))::int AS suppressed,
       (count(*) FILTER (WHERE state = 'throttled'))::int AS throttled,
       (count(*) FILTER (WHERE state IN ('selected', 'enqueued', 'claimed', 'retryable',
                                         'uncertain', 'parked') AND expires_at <= %(now)s))::int AS overdue,
       min(due_at) FILTER (WHERE state IN ('selected', 'enqueued', 'claimed', 'retryable',
                                           'uncertain', 'parked') AND due_at <= %(now)s) AS oldest_due_at,
       min(expires_at) FILTER (WHERE state IN ('selected', 'enqueued', 'claimed',
                                               'retryable', 'uncertain', 'parked')) AS earliest_expiry
FROM intents
GROUP BY campaign, channel
ORDER BY campaign NULLS FIRST, channel

-- name: intent_latency_histogram
-- Seconds from due to acceptance, counted per channel into the buckets of the array
-- %(bounds)s (ascending upper bounds, numbered from 0); bucket NULL is beyond the last.
SELECT channel,
       (SELECT min(b.n) - 1 FROM unnest(%(bounds)s::float8[]) WITH ORDINALITY AS b(le, n)
        WHERE i.accepted_at - i.due_at <= b.le) AS bucket,
       count(*)::int, sum(greatest(i.accepted_at - i.due_at, 0.0))
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
WHERE recipient_id = %(recipient_id)s
ORDER BY due_at DESC, key
LIMIT %(limit)s

-- name: event_keys_by_detail
-- Keys whose events carry %(detail)s (a recipient surrogate on send outcomes); a scan: a
-- look-up by a surrogate read in a log line, rare enough not to cost every event an
-- index entry.
SELECT key FROM events WHERE detail = %(detail)s GROUP BY key ORDER BY max(id) DESC
LIMIT %(limit)s
