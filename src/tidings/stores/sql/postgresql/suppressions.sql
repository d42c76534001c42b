-- The suppression list (tidings.core.suppression; migrations/0014_suppressions.sql):
-- one row per normalised address and channel kind, the first suppression standing.

-- name: suppression_insert_many
-- One array per column, one entry per index; an address already suppressed on its kind
-- keeps its row (a concurrent insert of the same pair waits, then does nothing), so the
-- rows returned are exactly the suppressions this transaction added.
INSERT INTO suppressions (address, kind, reason, source, created_at, key, detail)
SELECT e.address, e.kind, e.reason, e.source, e.created_at, e.key, e.detail
FROM unnest(%(addresses)s::text[], %(kinds)s::text[], %(reasons)s::text[],
            %(sources)s::text[], %(created_ats)s::float8[], %(keys)s::text[],
            %(details)s::text[])
     WITH ORDINALITY AS e(address, kind, reason, source, created_at, key, detail, n)
ORDER BY e.n
ON CONFLICT (address, kind) DO NOTHING
RETURNING address, kind

-- name: suppression_events
-- The timeline event of each suppression added now because of an intent (one key and
-- detail per index): the intent's state and attempts as they are.
INSERT INTO events (key, channel, type, at, state, attempt, detail)
SELECT i.key, i.channel, 'address_suppressed', %(now)s::float8, i.state, i.attempts,
       e.detail
FROM unnest(%(keys)s::text[], %(details)s::text[]) WITH ORDINALITY AS e(key, detail, n)
JOIN intents AS i ON i.key = e.key
ORDER BY e.n

-- name: suppression_delete
DELETE FROM suppressions WHERE address = %(address)s AND kind = %(kind)s
RETURNING address, kind, reason, source, created_at, key, detail

-- name: suppressions_for
-- Two arrays, one pair per index; one primary-key lookup per distinct pair.
SELECT s.address, s.kind, s.reason, s.source, s.created_at, s.key, s.detail
FROM (
    SELECT DISTINCT address, kind
    FROM unnest(%(addresses)s::text[], %(kinds)s::text[]) AS w(address, kind)
) AS wanted
JOIN suppressions AS s ON s.address = wanted.address AND s.kind = wanted.kind

-- name: suppression_list
-- A page in (address, kind) order after the pair given, narrowed by kind and reason
-- when given. COLLATE "C": the order of bytes, as SQLite's, on any database collation.
SELECT address, kind, reason, source, created_at, key, detail
FROM suppressions
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(reason)s::text IS NULL OR reason = %(reason)s::text)
  AND (%(after_address)s::text IS NULL
       OR (address COLLATE "C", kind COLLATE "C")
          > (%(after_address)s::text COLLATE "C", %(after_kind)s::text COLLATE "C"))
ORDER BY address COLLATE "C", kind COLLATE "C"
LIMIT %(limit)s

-- name: suppression_counts
SELECT kind, reason, count(*)::int AS total FROM suppressions GROUP BY kind, reason
ORDER BY kind, reason

-- name: intent_suppressed_counts
-- Sends ended unsent because their address is suppressed, per channel and the list's
-- reason (the intent's reason; tidings.delivery.compose.Suppressed).
SELECT channel, reason, count(*)::int AS total FROM intents WHERE state = 'suppressed'
GROUP BY channel, reason
ORDER BY channel, reason

-- name: suppression_strike_insert_many
-- One array per column, one strike per index; a repeat of a source is one strike.
INSERT INTO suppression_strikes (address, kind, source, at)
SELECT * FROM unnest(%(addresses)s::text[], %(kinds)s::text[], %(sources)s::text[],
                     %(ats)s::float8[])
ON CONFLICT (address, kind, source) DO NOTHING

-- name: suppression_strike_counts
-- Strikes since the window start of the pairs given (one per index of two arrays), and
-- the source of the latest.
SELECT s.address, s.kind, count(*)::int AS strikes, max(s.at) AS last_at,
       (array_agg(s.source ORDER BY s.at DESC, s.source DESC))[1] AS last_source
FROM (
    SELECT DISTINCT address, kind
    FROM unnest(%(addresses)s::text[], %(kinds)s::text[]) AS w(address, kind)
) AS wanted
JOIN suppression_strikes AS s ON s.address = wanted.address AND s.kind = wanted.kind
WHERE s.at >= %(since)s
GROUP BY s.address, s.kind

-- name: suppression_strike_prune
-- Strikes older than the window of the pairs given: they count no more.
DELETE FROM suppression_strikes AS s
USING unnest(%(addresses)s::text[], %(kinds)s::text[]) AS w(address, kind)
WHERE s.address = w.address AND s.kind = w.kind AND s.at < %(since)s
