-- Provider webhooks: events after acceptance, idempotent per (provider, message id,
-- type), on the intent's timeline or kept as orphans (see migrations/0004_webhooks.sql).

-- name: intents_by_receipts
-- The intents the provider message ids of a batch stand for (serves from
-- intents_receipt). A receipt belongs to one intent; should two share one, the first
-- key wins, every time.
SELECT DISTINCT ON (receipt) receipt, key, channel, state, attempts, address
FROM intents
WHERE receipt = ANY(%(message_ids)s::text[])
ORDER BY receipt, key

-- name: provider_events_insert_many
-- One statement per batch; the rows returned are exactly those this transaction
-- inserted (a concurrent insert of the same event waits for it, then does nothing).
INSERT INTO provider_events (provider, message_id, type, at, received_at, key, detail,
                             bounce)
SELECT e.provider, e.message_id, e.type, e.at, %(now)s::float8, e.key, e.detail, e.bounce
FROM unnest(%(providers)s::text[], %(message_ids)s::text[], %(types)s::text[],
            %(ats)s::float8[], %(keys)s::text[], %(details)s::text[], %(bounces)s::text[])
     WITH ORDINALITY AS e(provider, message_id, type, at, key, detail, bounce, n)
ORDER BY e.n
ON CONFLICT (provider, message_id, type) DO NOTHING
RETURNING provider, message_id, type

-- name: intent_report_move
-- A provider's report moves its accepted intent on (tidings.core.states.report_move):
-- to the target from any of the source states (accepted-family ones), else not at
-- all, so a replayed or out-of-order report changes nothing. A report racing another
-- on the same row waits for it, then meets the state it left. accepted_at,
-- finished_at, the receipt and the reason stay as the acceptance left them.
UPDATE intents SET state = %(to_state)s, disposition = %(to_state)s, updated_at = %(now)s
WHERE key = %(key)s AND state = ANY(%(sources)s::text[])
RETURNING state

-- name: provider_events_orphaned
SELECT provider, message_id, type, at, detail, key, received_at FROM provider_events
WHERE key IS NULL
ORDER BY received_at, id
LIMIT %(limit)s

-- name: provider_events_adopt
-- Attach orphans received since %(since)s whose message id is now an intent's receipt.
-- The rows are locked, then re-checked (key IS NULL) by the UPDATE: of two sweeps at
-- once, one attaches each event. Returns what the timeline events need.
WITH candidates AS (
    SELECT p.id, i.key, i.channel, i.state, i.attempts, i.address
    FROM provider_events AS p
    JOIN LATERAL (SELECT key, channel, state, attempts, address FROM intents
                  WHERE receipt = p.message_id ORDER BY key LIMIT 1) AS i ON true
    WHERE p.key IS NULL AND p.received_at >= %(since)s
    ORDER BY p.received_at, p.id
    LIMIT %(limit)s
    FOR UPDATE OF p SKIP LOCKED
)
UPDATE provider_events AS p SET key = c.key
FROM candidates AS c
WHERE p.id = c.id AND p.key IS NULL
RETURNING p.id, p.provider, p.message_id, p.type, p.at, p.detail, p.bounce, p.received_at,
          c.key, c.channel, c.state, c.attempts, c.address

-- name: provider_event_counts
SELECT provider, type, count(*)::int AS total,
       (count(*) FILTER (WHERE key IS NULL))::int AS orphaned
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
