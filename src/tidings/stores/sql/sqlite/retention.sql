-- Retention (tidings.retention holds the rule): bounded prunes of terminal intents,
-- their events and finished occurrences. SQLite deletes events row-wise, by key, in
-- the same transaction as their intents. A prunable intent: terminal, finished and
-- last updated before the cutoff (so created before it too: intents_created).
--
-- The reads of intents name their index (INDEXED BY intents_created). tidings never runs
-- ANALYZE, and with no statistics SQLite took intents_state for `state IN (...)`: every
-- terminal intent of the ledger, then a temporary B-tree for the order, 2.3 s a batch on
-- a ledger of a million, inside the write transaction, while every writer waited. By
-- creation time, a batch reads the oldest rows and stops at its limit.

-- name: retention_prune_intents
DELETE FROM intents
WHERE key IN (SELECT key FROM intents INDEXED BY intents_created
              WHERE created_at < :cutoff AND state IN (SELECT value FROM json_each(:states))
                AND finished_at < :cutoff AND updated_at < :cutoff
              ORDER BY created_at
              LIMIT :limit)
RETURNING key

-- name: retention_prune_events
DELETE FROM events WHERE key IN (SELECT value FROM json_each(:keys))

-- name: retention_prune_occurrences
DELETE FROM occurrences
WHERE id IN (SELECT id FROM occurrences
             WHERE status IN ('done', 'skipped') AND finished_at < :cutoff
               AND id NOT IN (SELECT occurrence FROM intents
                              WHERE state IN (SELECT value FROM json_each(:pending)) AND occurrence IS NOT NULL)
             ORDER BY finished_at
             LIMIT :limit)

-- name: retention_count_intents
SELECT count(*) FROM intents INDEXED BY intents_created
WHERE created_at < :cutoff AND state IN (SELECT value FROM json_each(:states))
  AND finished_at < :cutoff AND updated_at < :cutoff

-- name: retention_count_events
SELECT count(*) FROM intents i INDEXED BY intents_created JOIN events e ON e.key = i.key
WHERE i.created_at < :cutoff AND i.state IN (SELECT value FROM json_each(:states))
  AND i.finished_at < :cutoff AND i.updated_at < :cutoff

-- name: retention_count_occurrences
SELECT count(*) FROM occurrences
WHERE status IN ('done', 'skipped') AND finished_at < :cutoff
  AND id NOT IN (SELECT occurrence FROM intents
                 WHERE state IN (SELECT value FROM json_each(:pending)) AND occurrence IS NOT NULL)

-- name: retention_oldest_kept
-- The first kept row in creation order (one row, NULL when none): min() with a WHERE
-- would read every row.
SELECT (SELECT created_at FROM intents INDEXED BY intents_created
        WHERE NOT (state IN (SELECT value FROM json_each(:states)) AND finished_at IS NOT NULL
                   AND finished_at < :cutoff AND updated_at < :cutoff)
        ORDER BY created_at
        LIMIT 1)

-- name: intent_age_span
-- Two subqueries: SQLite answers a lone min() or max() with one probe of intents_created,
-- both in one SELECT with a scan of the whole index.
SELECT (SELECT min(created_at) FROM intents), (SELECT max(created_at) FROM intents)

-- name: event_last
-- The latest event of a key (the last prune's audit event: tidings.retention).
SELECT key, channel, type, at, state, attempt, worker, message_id, provider_request_id, detail
FROM events
WHERE key = ?
ORDER BY id DESC
LIMIT 1
