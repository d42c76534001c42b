-- The suppression list (tidings.core.suppression; migrations/0014_suppressions.sql):
-- one row per normalised address and channel kind, the first suppression standing.

-- name: suppression_insert_many
-- :entries is a JSON array of [address, kind, reason, source, created_at, key, detail];
-- an address already suppressed on its kind keeps its row, so the rows returned are
-- exactly the suppressions added now. "WHERE true": as provider_events_insert_many.
INSERT INTO suppressions (address, kind, reason, source, created_at, key, detail)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]')
FROM json_each(:entries)
WHERE true
ORDER BY json_each.key
ON CONFLICT (address, kind) DO NOTHING
RETURNING address, kind

-- name: suppression_events
-- The timeline event of each suppression added now because of an intent (:entries, a
-- JSON array of [key, detail]): the intent's state and attempts as they are.
INSERT INTO events (key, channel, type, at, state, attempt, detail)
SELECT i.key, i.channel, 'address_suppressed', :now, i.state, i.attempts,
       json_extract(e.value, '$[1]')
FROM json_each(:entries) AS e
JOIN intents AS i ON i.key = json_extract(e.value, '$[0]')
ORDER BY e.key

-- name: suppression_delete
DELETE FROM suppressions WHERE address = :address AND kind = :kind
RETURNING address, kind, reason, source, created_at, key, detail

-- name: suppressions_for
-- :pairs is a JSON array of distinct [address, kind] pairs (one array: two arrays
-- zipped by index would scan one per row of the other); one primary-key lookup per
-- pair. The EXISTS is a constant term, evaluated once before the loop: an empty list
-- (most senders' on most days) costs no lookup at all.
SELECT s.address, s.kind, s.reason, s.source, s.created_at, s.key, s.detail
FROM json_each(:pairs) AS p
JOIN suppressions AS s
  ON s.address = json_extract(p.value, '$[0]') AND s.kind = json_extract(p.value, '$[1]')
WHERE EXISTS (SELECT 1 FROM suppressions)

-- name: suppression_list
-- A page in (address, kind) order after (:after_address, :after_kind), narrowed by
-- kind and reason when given.
SELECT address, kind, reason, source, created_at, key, detail
FROM suppressions
WHERE (:kind IS NULL OR kind = :kind)
  AND (:reason IS NULL OR reason = :reason)
  AND (:after_address IS NULL OR (address, kind) > (:after_address, :after_kind))
ORDER BY address, kind
LIMIT :limit

-- name: suppression_counts
SELECT kind, reason, count(*) AS total FROM suppressions GROUP BY kind, reason
ORDER BY kind, reason

-- name: intent_suppressed_counts
-- Sends ended unsent because their address is suppressed, per channel and the list's
-- reason (the intent's reason; tidings.delivery.compose.Suppressed).
SELECT channel, reason, count(*) AS total FROM intents WHERE state = 'suppressed'
GROUP BY channel, reason
ORDER BY channel, reason

-- name: suppression_strike_insert_many
-- :strikes is a JSON array of [address, kind, source, at]; a repeat of a source is
-- one strike.
INSERT INTO suppression_strikes (address, kind, source, at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]')
FROM json_each(:strikes)
WHERE true
ON CONFLICT (address, kind, source) DO NOTHING

-- name: suppression_strike_counts
-- Strikes since :since of the pairs in :pairs (a JSON array of [address, kind]), and
-- the source of the latest (SQLite takes a bare column from the row of max()); pruning
-- none: suppression_strike_prune does that.
SELECT s.address, s.kind, count(*) AS strikes, max(s.at) AS last_at, s.source AS last_source
FROM (
    SELECT DISTINCT json_extract(p.value, '$[0]') AS address,
                    json_extract(p.value, '$[1]') AS kind
    FROM json_each(:pairs) AS p
) AS wanted
JOIN suppression_strikes AS s ON s.address = wanted.address AND s.kind = wanted.kind
WHERE s.at >= :since
GROUP BY s.address, s.kind

-- name: suppression_strike_prune
-- Strikes older than the window of the pairs in :pairs: they count no more.
DELETE FROM suppression_strikes
WHERE at < :since
  AND (address, kind) IN (
    SELECT json_extract(p.value, '$[0]'), json_extract(p.value, '$[1]')
    FROM json_each(:pairs) AS p)
