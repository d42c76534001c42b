-- Intents: admission, the outbox relay, the worker's claims and outcomes, reads.
-- Every "now" is a parameter; no query reads the clock.

-- name: intent_existing_keys
-- Which of the JSON array :keys already exist. Admission asks first, in the same write
-- transaction, instead of RETURNING from the insert: the key list comes back about
-- twice as cheap as RETURNING buffers a whole page of rows.
SELECT key FROM intents WHERE key IN (SELECT value FROM json_each(:keys))

-- name: intent_bodies
-- What the intents of the JSON array :keys were asked for (core/repeats.IntentBody): a
-- notify repeated under its key is compared with them in the transaction that writes it.
SELECT key, channel, recipient_id, address, template, data, due_at, expires_at, created_at
FROM intents WHERE key IN (SELECT value FROM json_each(:keys))

-- name: intent_admit_values
-- The caller replaces {rows} with one "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" group per
-- draft (key, channel, recipient_id, address, template, data, campaign, occurrence,
-- due_at, expires_at, lane, group_key); the four leading parameters are created_at, updated_at, selected_at and
-- publish_lease_until. One statement binds a thousand rows: far fewer round trips than
-- an executemany. "WHERE true" is how SQLite tells an upsert's ON from a join's.
INSERT INTO intents (
    created_at, updated_at, selected_at, publish_lease_until, state,
    key, channel, recipient_id, address, template, data, campaign, occurrence,
    due_at, expires_at, lane, group_key
)
SELECT ?, ?, ?, ?, 'selected', v.* FROM (VALUES {rows}) AS v WHERE true
ON CONFLICT (key) DO NOTHING

-- name: intent_admit_values_enqueued
-- As intent_admit_values, for intents whose messages go into the embedded queue in the
-- same transaction: born enqueued. The four leading parameters are created_at,
-- updated_at, selected_at and enqueued_at.
INSERT INTO intents (
    created_at, updated_at, selected_at, enqueued_at, state,
    key, channel, recipient_id, address, template, data, campaign, occurrence,
    due_at, expires_at, lane, group_key
)
SELECT ?, ?, ?, ?, 'enqueued', v.* FROM (VALUES {rows}) AS v WHERE true
ON CONFLICT (key) DO NOTHING

-- name: intent_admit_page
-- A campaign page (see model.DraftPage), one channel at a time: what the page shares is
-- bound once, in the twelve leading parameters (created_at, updated_at, selected_at,
-- publish_lease_until, channel, template, campaign, occurrence, due_at, expires_at, lane,
-- group_key),
-- and each intent adds only its four: the caller replaces {rows} with one
-- "(?, ?, ?, ?)" group per intent (key, recipient_id, address, data).
INSERT INTO intents (
    created_at, updated_at, selected_at, publish_lease_until, state,
    channel, template, campaign, occurrence, due_at, expires_at, lane, group_key,
    key, recipient_id, address, data
)
SELECT ?, ?, ?, ?, 'selected', ?, ?, ?, ?, ?, ?, ?, ?, v.* FROM (VALUES {rows}) AS v
WHERE true
ON CONFLICT (key) DO NOTHING

-- name: intent_admit_page_enqueued
-- intent_admit_page for intents born enqueued (their messages in the same
-- transaction); the fourth leading parameter is enqueued_at.
INSERT INTO intents (
    created_at, updated_at, selected_at, enqueued_at, state,
    channel, template, campaign, occurrence, due_at, expires_at, lane, group_key,
    key, recipient_id, address, data
)
SELECT ?, ?, ?, ?, 'enqueued', ?, ?, ?, ?, ?, ?, ?, ?, v.* FROM (VALUES {rows}) AS v
WHERE true
ON CONFLICT (key) DO NOTHING

-- name: intent_claim_publish
UPDATE intents SET publish_lease_until = :lease_until
WHERE key IN (
    SELECT key FROM intents
    WHERE state = 'selected' AND due_at <= :due_by
      AND (publish_lease_until IS NULL OR publish_lease_until <= :now)
    ORDER BY due_at
    LIMIT :limit
)
RETURNING key, channel, due_at, state, lane, group_key AS "group"

-- name: intent_extend_publish
-- A relay still publishing a page moves the lease of its unpublished rest forward, but
-- only of the rows it still holds (the lease it set, still selected): a row whose lease
-- lapsed and that another relay took since is not extended, and is left to that relay.
-- :keys is a JSON array; + keeps the planner on the primary key.
UPDATE intents SET publish_lease_until = :lease_until
WHERE key IN (SELECT value FROM json_each(:keys))
  AND +state = 'selected' AND +publish_lease_until = :held_until
RETURNING key

-- name: intent_mark_enqueued_events
-- Written just before intent_mark_enqueued, with the same filter in the same
-- transaction: one enqueued event per intent it is about to move. (RETURNING the
-- rows to build the events in Python costs more than this second look-up.)
-- :keys is a JSON array of keys. The unary + keeps the planner on the primary key:
-- without it, it walks every row of the state index and probes the key list.
INSERT INTO events (key, channel, type, at, state, attempt)
SELECT key, channel, 'enqueued', :now, 'enqueued', attempts
FROM intents
WHERE key IN (SELECT value FROM json_each(:keys))
  AND +state IN ('selected', 'retryable')

-- name: intent_mark_enqueued
-- Same :keys and the same + as intent_mark_enqueued_events.
UPDATE intents
SET state = 'enqueued', enqueued_at = :now, updated_at = :now, publish_lease_until = NULL
WHERE key IN (SELECT value FROM json_each(:keys))
  AND +state IN ('selected', 'retryable')

-- name: intent_claim_read
-- The current rows of the keys a worker wants to claim (:keys is a JSON array).
SELECT key, channel, recipient_id, address, template, data, campaign, occurrence, state,
       due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
       finished_at, attempts, failures, lease_owner, lease_token, lease_expires_at,
       next_attempt_at, receipt, provider_request_id, disposition, reason, cancel_requested,
       lane, group_key
FROM intents
WHERE key IN (SELECT value FROM json_each(:keys))

-- name: intent_claim
-- Guarded by the state and token read in the same transaction. The fourth parameter,
-- when true, marks the send started under the new lease at once (see
-- Ledger.intent_claim_many's ``started``).
UPDATE intents
SET state = 'claimed', lease_owner = ?, lease_token = lease_token + 1, lease_expires_at = ?,
    attempts = attempts + 1, updated_at = ?, publish_lease_until = NULL,
    send_started_token = CASE WHEN ? THEN lease_token + 1 ELSE send_started_token END
WHERE key = ? AND state = ? AND lease_token = ?

-- name: intent_renew_leases
-- :leases is a JSON array of [key, token] pairs; + keeps the planner on the primary key.
UPDATE intents SET lease_expires_at = :expires_at
FROM (
    SELECT json_extract(value, '$[0]') AS lease_key, json_extract(value, '$[1]') AS token
    FROM json_each(:leases)
) AS lease
WHERE intents.key = lease.lease_key
  AND intents.lease_token = lease.token
  AND +intents.state = 'claimed'
  AND intents.lease_owner = :owner
  AND intents.lease_expires_at > :now
RETURNING key

-- name: intent_mark_started
-- A worker's sends about to leave: each intent records the lease token its send
-- started under, guarded like a renewal (still claimed, still ours, lease not run
-- out), so a send is started only under a lease nobody else can have taken. The keys
-- marked are returned; a send whose key is missing must not start. :leases is a JSON
-- array of [key, token] pairs.
UPDATE intents SET send_started_token = intents.lease_token
FROM (
    SELECT json_extract(value, '$[0]') AS lease_key, json_extract(value, '$[1]') AS token
    FROM json_each(:leases)
) AS lease
WHERE intents.key = lease.lease_key
  AND intents.lease_token = lease.token
  AND +intents.state = 'claimed'
  AND intents.lease_owner = :owner
  AND intents.lease_expires_at > :now
RETURNING key

-- name: intent_apply
-- One guarded change; the flags (:leaves_claimed, :terminal, :reopens) are computed
-- from tidings.states so the field effects of a target state live in one place.
UPDATE intents SET
    state               = :to_state,
    updated_at          = :now,
    enqueued_at         = CASE WHEN :to_state = 'enqueued' THEN :now ELSE enqueued_at END,
    publish_lease_until = CASE WHEN :to_state = 'enqueued' THEN NULL ELSE publish_lease_until END,
    accepted_at         = CASE WHEN :to_state = 'accepted' THEN :now ELSE accepted_at END,
    receipt             = CASE WHEN :to_state = 'accepted' THEN :receipt ELSE receipt END,
    next_attempt_at     = CASE WHEN :to_state IN ('retryable', 'uncertain') THEN :next_attempt_at
                               ELSE next_attempt_at END,
    lease_owner         = CASE WHEN :leaves_claimed THEN NULL ELSE lease_owner END,
    lease_expires_at    = CASE WHEN :leaves_claimed THEN NULL ELSE lease_expires_at END,
    finished_at         = CASE WHEN :terminal THEN :now WHEN :reopens THEN NULL
                               ELSE finished_at END,
    disposition         = CASE WHEN :terminal THEN :to_state WHEN :reopens THEN NULL
                               ELSE disposition END,
    reason              = CASE WHEN :terminal THEN :reason ELSE reason END,
    attempts            = attempts + :count_attempt,
    failures            = CASE WHEN :reset_failures THEN 0 ELSE failures + :count_failure END,
    provider_request_id = coalesce(:provider_request_id, provider_request_id)
WHERE key = :key
  AND state = :from_state
  AND (:lease_token IS NULL OR lease_token = :lease_token)
  AND (:lease_expired_by IS NULL OR lease_expires_at <= :lease_expired_by)
  AND (NOT :unstarted OR send_started_token IS NOT lease_token)
RETURNING channel, attempts

-- name: intent_cancel_read
SELECT state, channel, attempts, cancel_requested FROM intents WHERE key = ?

-- name: intent_cancel_request
-- A claimed intent: the worker sees the request before its send.
UPDATE intents SET cancel_requested = 1, updated_at = ? WHERE key = ? AND state = 'claimed'

-- name: intent_get
SELECT key, channel, recipient_id, address, template, data, campaign, occurrence, state,
       due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
       finished_at, attempts, failures, lease_owner, lease_token, lease_expires_at,
       next_attempt_at, receipt, provider_request_id, disposition, reason, cancel_requested,
       lane, group_key
FROM intents
WHERE key = ?

-- name: intent_find
-- :states is a JSON array; a NULL filter is off. :lease_expired_at only narrows claimed rows.
-- The order is the index's own, so a page stops early, unsorted; :due_before bounds the
-- index's range (a COALESCE, not an OR: SQLite then searches due_at <= it, never past).
SELECT key, channel, recipient_id, address, template, data, campaign, occurrence, state,
       due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
       finished_at, attempts, failures, lease_owner, lease_token, lease_expires_at,
       next_attempt_at, receipt, provider_request_id, disposition, reason, cancel_requested,
       lane, group_key
FROM intents
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:channel IS NULL OR channel = :channel)
  AND (:updated_before IS NULL OR updated_at < :updated_before)
  AND (:lease_expired_at IS NULL OR state <> 'claimed' OR lease_expires_at <= :lease_expired_at)
  AND (:lease_owner IS NULL OR lease_owner = :lease_owner)
  AND due_at <= coalesce(:due_before, 1e308)
ORDER BY state, due_at, updated_at, key
LIMIT :limit

-- name: intent_counts
SELECT channel, state, count(*) FROM intents GROUP BY channel, state

-- name: intent_latencies
SELECT accepted_at - due_at FROM intents
WHERE channel = ? AND accepted_at IS NOT NULL
ORDER BY accepted_at
