-- Delivery holds (tidings.holds) and the selections of bulk actions (tidings.bulk).

-- name: hold_insert
-- Hold unless already held: the caller that gets a row back held it.
INSERT INTO holds (scope, name, held_at, held_by, reason)
VALUES (%(scope)s, %(name)s, %(now)s, %(by)s, %(reason)s)
ON CONFLICT (scope, name) DO NOTHING
RETURNING scope, name, held_at, held_by, reason

-- name: hold_delete
DELETE FROM holds WHERE scope = %(scope)s AND name = %(name)s
RETURNING scope, name, held_at, held_by, reason

-- name: hold_all
SELECT scope, name, held_at, held_by, reason FROM holds ORDER BY scope, name

-- name: switch_declare
-- A switch's first state (a campaign declared start_paused); an existing one is kept.
INSERT INTO switches (scope, name, paused, changed_at, reason)
VALUES (%(scope)s, %(name)s, %(paused)s, %(now)s, %(reason)s)
ON CONFLICT (scope, name) DO NOTHING
RETURNING scope, name, paused, changed_at, reason

-- name: intent_select
-- A page of a selection in key order after %(after)s; a NULL filter is off.
SELECT key, channel, recipient_id, address, template, data, campaign, occurrence, state,
       due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
       finished_at, attempts, failures, lease_owner, lease_token, lease_expires_at,
       next_attempt_at, receipt, provider_request_id, disposition, reason, cancel_requested,
       lane, group_key
FROM intents
WHERE state = ANY(%(states)s::text[])
  AND (%(campaign)s::text IS NULL OR campaign = %(campaign)s::text)
  AND (%(occurrence)s::text IS NULL OR occurrence = %(occurrence)s::text)
  AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
  AND (%(due_before)s::float8 IS NULL OR due_at < %(due_before)s::float8)
  AND (%(expires_by)s::float8 IS NULL OR expires_at <= %(expires_by)s::float8)
  AND (%(updated_after)s::float8 IS NULL OR updated_at >= %(updated_after)s::float8)
  AND NOT channel = ANY(%(not_channels)s::text[])
  AND (campaign IS NULL OR NOT campaign = ANY(%(not_campaigns)s::text[]))
  AND (occurrence IS NULL OR NOT occurrence = ANY(%(not_occurrences)s::text[]))
  AND (%(after)s::text IS NULL OR key > %(after)s::text)
ORDER BY key
LIMIT %(limit)s

-- name: intent_select_counts
SELECT state, count(*)::int FROM intents
WHERE state = ANY(%(states)s::text[])
  AND (%(campaign)s::text IS NULL OR campaign = %(campaign)s::text)
  AND (%(occurrence)s::text IS NULL OR occurrence = %(occurrence)s::text)
  AND (%(channel)s::text IS NULL OR channel = %(channel)s::text)
  AND (%(due_before)s::float8 IS NULL OR due_at < %(due_before)s::float8)
  AND (%(expires_by)s::float8 IS NULL OR expires_at <= %(expires_by)s::float8)
  AND (%(updated_after)s::float8 IS NULL OR updated_at >= %(updated_after)s::float8)
  AND NOT channel = ANY(%(not_channels)s::text[])
  AND (campaign IS NULL OR NOT campaign = ANY(%(not_campaigns)s::text[]))
  AND (occurrence IS NULL OR NOT occurrence = ANY(%(not_occurrences)s::text[]))
GROUP BY state
