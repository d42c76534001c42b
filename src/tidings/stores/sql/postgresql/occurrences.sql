-- Campaign occurrences: one row per logical date, advanced page by page.

-- name: occurrence_insert
-- A new occurrence starts admitting; the pass that opens it is its first.
INSERT INTO occurrences (id, campaign, logical_at, logical_date, kind, status, passes,
                         created_at)
VALUES (%(id)s, %(campaign)s, %(logical_at)s, %(logical_date)s, %(kind)s, 'admitting', 1,
        %(now)s)
ON CONFLICT (id) DO NOTHING

-- name: occurrence_reopen
-- An existing occurrence opened again. A replay re-opens it with kind replay unless it
-- is done; an opening that leaves it admitting counts one more pass.
UPDATE occurrences SET
    passes      = passes + (status = 'admitting'
                            OR (%(kind)s::text = 'replay' AND status <> 'done'))::int,
    kind        = CASE WHEN %(kind)s::text = 'replay' AND status <> 'done' THEN 'replay'
                       ELSE kind END,
    finished_at = CASE WHEN %(kind)s::text = 'replay' AND status <> 'done' THEN NULL
                       ELSE finished_at END,
    reason      = CASE WHEN %(kind)s::text = 'replay' AND status <> 'done' THEN NULL
                       ELSE reason END,
    status      = CASE WHEN %(kind)s::text = 'replay' AND status <> 'done' THEN 'admitting'
                       ELSE status END
WHERE id = %(id)s

-- name: occurrence_progress
-- The page counts and the high-water mark move only if the page started from the
-- current mark (after): when two schedulers admit the same page, the second one's
-- keys already exist and its page is not counted twice, nor the mark moved back.
UPDATE occurrences
SET admitted = admitted + %(admitted)s,
    members = members + CASE WHEN high_water IS NOT DISTINCT FROM %(after)s::text
                             THEN %(members)s ELSE 0 END,
    skipped = skipped + CASE WHEN high_water IS NOT DISTINCT FROM %(after)s::text
                             THEN %(skipped)s ELSE 0 END,
    suppressed = suppressed + CASE WHEN high_water IS NOT DISTINCT FROM %(after)s::text
                                   THEN %(suppressed)s ELSE 0 END,
    high_water = CASE WHEN high_water IS NOT DISTINCT FROM %(after)s::text
                      THEN %(high_water)s ELSE high_water END
WHERE id = %(id)s

-- name: occurrence_restart
-- An occurrence admitted again from its first member (a replay under a new campaign
-- version: the new keys are new intents); what it admitted before stays counted.
UPDATE occurrences
SET status = 'admitting', kind = 'replay', high_water = NULL, members = 0, skipped = 0,
    suppressed = 0, passes = passes + 1, finished_at = NULL, reason = %(reason)s
WHERE id = %(id)s

-- name: occurrence_finish
UPDATE occurrences SET status = %(status)s, finished_at = %(now)s, reason = %(reason)s
WHERE id = %(id)s

-- name: occurrence_get
SELECT id, campaign, logical_at, logical_date, kind, status, high_water, members, admitted,
       skipped, passes, created_at, finished_at, reason, suppressed
FROM occurrences
WHERE id = %s

-- name: occurrence_list
-- %(campaign)s NULL lists every campaign.
SELECT id, campaign, logical_at, logical_date, kind, status, high_water, members, admitted,
       skipped, passes, created_at, finished_at, reason, suppressed
FROM occurrences
WHERE %(campaign)s::text IS NULL OR campaign = %(campaign)s::text
ORDER BY campaign, logical_at, id
