-- Retention (tidings.retention holds the rule): bounded prunes of terminal intents,
-- their events and finished occurrences, and the events table's day partitions.
-- A prunable intent: terminal, finished and last updated before the cutoff (so it was
-- created before it too, which is what lets intents_created narrow the scan).

-- name: retention_prune_intents
-- The oldest first; rows another transaction holds are left for the next batch.
WITH doomed AS (
    SELECT key FROM intents
    WHERE created_at < %(cutoff)s AND state = ANY(%(states)s)
      AND finished_at < %(cutoff)s AND updated_at < %(cutoff)s
    ORDER BY created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM intents i USING doomed d WHERE i.key = d.key
RETURNING i.key

-- name: retention_prune_events
-- The default partition is never dropped: its rows of pruned intents go by key. Those
-- in day partitions go with their partition (event_partition_drop, or swept by
-- event_orphans_delete while an older intent is kept).
DELETE FROM events_default WHERE key = ANY(%(keys)s)

-- name: retention_prune_occurrences
DELETE FROM occurrences
WHERE id IN (SELECT id FROM occurrences
             WHERE status IN ('done', 'skipped') AND finished_at < %(cutoff)s
               AND id NOT IN (SELECT occurrence FROM intents
                              WHERE state = ANY(%(pending)s) AND occurrence IS NOT NULL)
             ORDER BY finished_at
             LIMIT %(limit)s)

-- name: retention_count_intents
SELECT count(*)::int FROM intents
WHERE created_at < %(cutoff)s AND state = ANY(%(states)s)
  AND finished_at < %(cutoff)s AND updated_at < %(cutoff)s

-- name: retention_count_events
SELECT count(*)::int FROM intents i JOIN events e ON e.key = i.key
WHERE i.created_at < %(cutoff)s AND i.state = ANY(%(states)s)
  AND i.finished_at < %(cutoff)s AND i.updated_at < %(cutoff)s

-- name: retention_count_occurrences
SELECT count(*)::int FROM occurrences
WHERE status IN ('done', 'skipped') AND finished_at < %(cutoff)s
  AND id NOT IN (SELECT occurrence FROM intents
                 WHERE state = ANY(%(pending)s) AND occurrence IS NOT NULL)

-- name: retention_oldest_kept
SELECT min(created_at) FROM intents
WHERE NOT (state = ANY(%(states)s) AND finished_at IS NOT NULL
           AND finished_at < %(cutoff)s AND updated_at < %(cutoff)s)

-- name: intent_age_span
SELECT min(created_at), max(created_at) FROM intents

-- name: event_partitions
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'events'::regclass
ORDER BY c.relname

-- name: event_partitions_detached
-- Day partitions detached by a prune that stopped before dropping them.
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
  AND NOT c.relispartition
  AND (c.relname LIKE 'events\_p%' OR c.relname LIKE 'events\_before\_%')
ORDER BY c.relname

-- name: event_partition_lock
-- One partition change at a time across every process; the others skip theirs (the
-- next prune does it), and none waits long for the table's lock behind a writer. Keyed
-- by schema: each schema has an events table of its own.
SELECT pg_try_advisory_xact_lock(1952737892, hashtext(current_schema()))

-- name: event_partition_lock_timeout
SET LOCAL lock_timeout = '1s'

-- name: event_default_has_range
SELECT EXISTS (SELECT 1 FROM events_default WHERE at >= %(lower)s AND at < %(upper)s)

-- name: event_partition_create
-- {name}, {lower} and {upper} are filled in as an identifier and literals (DDL takes
-- no parameters).
CREATE TABLE IF NOT EXISTS {name} PARTITION OF events FOR VALUES FROM ({lower}) TO ({upper})

-- name: event_partition_detach
ALTER TABLE events DETACH PARTITION {name}

-- name: event_partition_count
SELECT count(*)::int, (count(*) FILTER (WHERE type <> ALL(%(types)s)))::int FROM {name}

-- name: event_partition_rescue
-- A detached partition's events of no intent, back into the table (the default
-- partition takes them: their day is no longer a partition).
INSERT INTO events (id, key, channel, type, at, state, attempt, worker, message_id,
                    provider_request_id, detail)
SELECT id, key, channel, type, at, state, attempt, worker, message_id,
       provider_request_id, detail
FROM {name} WHERE type <> ALL(%(types)s)

-- name: event_partition_drop
DROP TABLE {name}

-- name: event_orphans_delete
DELETE FROM {name}
WHERE ctid = ANY(ARRAY(
    SELECT e.ctid FROM {name} e
    WHERE e.at < %(before)s AND e.type = ANY(%(types)s)
      AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.key = e.key)
    LIMIT %(limit)s))

-- name: event_last
-- The latest event of a key (the last prune's audit event: tidings.retention).
SELECT key, channel, type, at, state, attempt, worker, message_id, provider_request_id, detail
FROM events
WHERE key = %s
ORDER BY id DESC
LIMIT 1
