-- Delivery holds (tidings.holds) and the selections of bulk actions (tidings.bulk).

-- name: hold_insert
-- Hold unless already held: the caller that gets a row back held it.
INSERT INTO holds (scope, name, held_at, held_by, reason)
VALUES (:scope, :name, :now, :by, :reason)
ON CONFLICT (scope, name) DO NOTHING
RETURNING scope, name, held_at, held_by, reason

-- name: hold_delete
DELETE FROM holds WHERE scope = :scope AND name = :name
RETURNING scope, name, held_at, held_by, reason

-- name: hold_all
SELECT scope, name, held_at, held_by, reason FROM holds ORDER BY scope, name

-- name: switch_declare
-- A switch's first state (a campaign declared start_paused); an existing one is kept.
INSERT INTO switches (scope, name, paused, changed_at, reason)
VALUES (:scope, :name, :paused, :now, :reason)
ON CONFLICT (scope, name) DO NOTHING
RETURNING scope, name, paused, changed_at, reason

-- name: intent_select
-- A page of a selection in key order after :after; a NULL filter is off.
SELECT key, channel, recipient_id, address, template, data, campaign, occurrence, state,
       due_at, expires_at, created_at, updated_at, selected_at, enqueued_at, accepted_at,
       finished_at, attempts, failures, lease_owner, lease_token, lease_expires_at,
       next_attempt_at, receipt, provider_request_id, disposition, reason, cancel_requested,
       lane, group_key
FROM intents
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:campaign IS NULL OR campaign = :campaign)
  AND (:occurrence IS NULL OR occurrence = :occurrence)
  AND (:channel IS NULL OR channel = :channel)
  AND (:due_before IS NULL OR due_at < :due_before)
  AND (:expires_by IS NULL OR expires_at <= :expires_by)
  AND (:updated_after IS NULL OR updated_at >= :updated_after)
  AND channel NOT IN (SELECT value FROM json_each(:not_channels))
  AND (campaign IS NULL OR campaign NOT IN (SELECT value FROM json_each(:not_campaigns)))
  AND (occurrence IS NULL
       OR occurrence NOT IN (SELECT value FROM json_each(:not_occurrences)))
  AND (:after IS NULL OR key > :after)
ORDER BY key
LIMIT :limit

-- name: intent_select_counts
SELECT state, count(*) FROM intents
WHERE state IN (SELECT value FROM json_each(:states))
  AND (:campaign IS NULL OR campaign = :campaign)
  AND (:occurrence IS NULL OR occurrence = :occurrence)
  AND (:channel IS NULL OR channel = :channel)
  AND (:due_before IS NULL OR due_at < :due_before)
  AND (:expires_by IS NULL OR expires_at <= :expires_by)
  AND (:updated_after IS NULL OR updated_at >= :updated_after)
  AND channel NOT IN (SELECT value FROM json_each(:not_channels))
  AND (campaign IS NULL OR campaign NOT IN (SELECT value FROM json_each(:not_campaigns)))
  AND (occurrence IS NULL
       OR occurrence NOT IN (SELECT value FROM json_each(:not_occurrences)))
GROUP BY state
