-- Provider webhooks: events after acceptance, idempotent per (provider, message id,
-- type), on the intent's timeline or kept as orphans (see migrations/0004_webhooks.sql).

-- name: intent_by_receipt
-- The intent a provider message id stands for (serves from intents_receipt). A receipt
-- belongs to one intent; should two share one, the first key wins, every time.
SELECT receipt, key, channel, state, attempts FROM intents
WHERE receipt = :message_id
ORDER BY key
LIMIT 1

-- name: provider_event_insert
-- A repeat of (provider, message_id, type) inserts nothing: rowcount 0 is a duplicate.
INSERT INTO provider_events (provider, message_id, type, at, received_at, key, detail)
VALUES (:provider, :message_id, :type, :at, :now, :key, :detail)
ON CONFLICT (provider, message_id, type) DO NOTHING

-- name: provider_events_orphaned
SELECT provider, message_id, type, at, detail, key, received_at FROM provider_events
WHERE key IS NULL
ORDER BY received_at, id
LIMIT :limit

-- name: provider_events_adoptable
-- Orphans received since :since whose message id is now an intent's receipt, with that
-- intent (the first key, as in intent_by_receipt).
SELECT o.id, o.provider, o.message_id, o.type, o.at, o.detail,
       i.key, i.channel, i.state, i.attempts
FROM (SELECT id, provider, message_id, type, at, detail, received_at
      FROM provider_events
      WHERE key IS NULL AND received_at >= :since
      ORDER BY received_at, id
      LIMIT :limit) AS o
JOIN intents AS i ON i.key = (SELECT key FROM intents WHERE receipt = o.message_id
                              ORDER BY key LIMIT 1)
ORDER BY o.received_at, o.id

-- name: provider_event_adopt
UPDATE provider_events SET key = :key WHERE id = :id AND key IS NULL

-- name: provider_event_counts
SELECT provider, type, count(*) AS total,
       sum(CASE WHEN key IS NULL THEN 1 ELSE 0 END) AS orphaned
FROM provider_events
GROUP BY provider, type
ORDER BY provider, type
