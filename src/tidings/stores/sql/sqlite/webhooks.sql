-- Provider webhooks: events after acceptance, idempotent per (provider, message id,
-- type), on the intent's timeline or kept as orphans (see migrations/0004_webhooks.sql).

-- name: intents_by_receipts
-- The intents the provider message ids of a batch (:message_ids, a JSON array) stand
-- for (serves from intents_receipt). A receipt belongs to one intent; should two share
-- one, the first key wins, every time.
SELECT i.receipt, i.key, i.channel, i.state, i.attempts, i.address
FROM (SELECT DISTINCT value AS receipt FROM json_each(:message_ids)) AS m
JOIN intents AS i ON i.key = (SELECT key FROM intents WHERE receipt = m.receipt
                              ORDER BY key LIMIT 1)

-- name: provider_events_insert_many
-- One statement per batch; :events is a JSON array of [provider, message_id, type, at,
-- key, detail, bounce], inserted in array order. A repeat of (provider, message_id,
-- type) inserts nothing, so the rows returned are exactly the events stored now.
-- "WHERE true" is how SQLite tells an upsert's ON from a join's.
INSERT INTO provider_events (provider, message_id, type, at, received_at, key, detail,
                             bounce)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), :now, json_extract(value, '$[4]'),
       json_extract(value, '$[5]'), json_extract(value, '$[6]')
FROM json_each(:events)
WHERE true
ORDER BY json_each.key
ON CONFLICT (provider, message_id, type) DO NOTHING
RETURNING provider, message_id, type

-- name: intent_report_move
-- A provider's report moves its accepted intent on (tidings.core.states.report_move):
-- to :to_state from any of :sources (a JSON array of accepted-family states), else
-- not at all, so a replayed or out-of-order report changes nothing. accepted_at,
-- finished_at, the receipt and the reason stay as the acceptance left them.
UPDATE intents SET state = :to_state, disposition = :to_state, updated_at = :now
WHERE key = :key AND state IN (SELECT value FROM json_each(:sources))
RETURNING state

-- name: provider_events_orphaned
SELECT provider, message_id, type, at, detail, key, received_at FROM provider_events
WHERE key IS NULL
ORDER BY received_at, id
LIMIT :limit

-- name: provider_events_adopt
-- Attach the orphans among the first :limit received since :since whose message id is
-- now an intent's receipt (the first key, as in intents_by_receipts). Returns what the
-- timeline events need.
UPDATE provider_events
SET key = (SELECT key FROM intents WHERE receipt = provider_events.message_id
           ORDER BY key LIMIT 1)
WHERE id IN (SELECT id FROM provider_events
             WHERE key IS NULL AND received_at >= :since
             ORDER BY received_at, id
             LIMIT :limit)
  AND EXISTS (SELECT 1 FROM intents WHERE receipt = provider_events.message_id)
RETURNING id, provider, message_id, type, at, detail, bounce, received_at, key,
          (SELECT channel FROM intents AS i WHERE i.key = provider_events.key) AS channel,
          (SELECT state FROM intents AS i WHERE i.key = provider_events.key) AS state,
          (SELECT attempts FROM intents AS i WHERE i.key = provider_events.key) AS attempts,
          (SELECT address FROM intents AS i WHERE i.key = provider_events.key) AS address

-- name: provider_event_counts
SELECT provider, type, count(*) AS total,
       sum(CASE WHEN key IS NULL THEN 1 ELSE 0 END) AS orphaned
FROM provider_events
GROUP BY provider, type
ORDER BY provider, type

-- name: campaign_report_counts
-- The providers' reports against the intents the ledger holds, per campaign (NULL for
-- one-off intents) and channel, for /metrics: hard and unclassified bounces (as
-- outcome_counts counts them) and complaints. Reads the reports' own index
-- (provider_events_reports_at, migration 0017), never the delivery reports.
SELECT i.campaign AS campaign, i.channel AS channel,
       sum(CASE WHEN p.type = 'bounced' THEN 1 ELSE 0 END) AS bounced,
       sum(CASE WHEN p.type = 'complained' THEN 1 ELSE 0 END) AS complained
FROM provider_events p JOIN intents i ON i.key = p.key
WHERE p.type IN ('bounced', 'complained') AND p.key IS NOT NULL
  AND (p.type = 'complained' OR coalesce(p.bounce, 'hard') = 'hard')
GROUP BY i.campaign, i.channel
