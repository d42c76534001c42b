-- What the guardrails read (tidings.guardrails): outcome events of a recent window, and
-- the providers' bounce and complaint reports of it.

-- name: outcome_counts
-- Per channel, campaign (NULL for notify intents), type and time bucket. The type list
-- is the events_outcomes_at index's own, so the planner walks that index.
SELECT e.channel AS channel, i.campaign AS campaign, e.type AS type,
       floor(e.at / %(bucket_s)s)::bigint AS bucket, count(*)::int AS count
FROM events e LEFT JOIN intents i ON i.key = e.key
WHERE e.at >= %(since)s
  AND e.type IN ('accepted', 'rejected', 'rate_limited', 'transient_failure', 'dead',
                 'uncertain', 'duplicate_observed')
GROUP BY 1, 2, 3, 4
UNION ALL
-- Provider reports by when they were recorded: hard (or unclassed) bounces as
-- 'bounced', complaints as 'complained', per the channel and campaign of their intent.
-- The type list and key test are provider_events_reports_at's own (migration 0017): a
-- partial index serves only a query whose WHERE names its condition (SQLite's planner
-- does not derive it from the OR below, and scanned every report without it).
SELECT i.channel AS channel, i.campaign AS campaign, p.type AS type,
       floor(p.received_at / %(bucket_s)s)::bigint AS bucket, count(*)::int AS count
FROM provider_events p JOIN intents i ON i.key = p.key
WHERE p.received_at >= %(since)s AND p.key IS NOT NULL
  AND p.type IN ('bounced', 'complained')
  AND (p.type = 'complained' OR (p.type = 'bounced' AND coalesce(p.bounce, 'hard') = 'hard'))
GROUP BY 1, 2, 3, 4

-- name: switch_trip
-- Pause unless already paused: the caller that gets a row back paused it.
INSERT INTO switches (scope, name, paused, changed_at, reason)
VALUES (%(scope)s, %(name)s, true, %(now)s, %(reason)s)
ON CONFLICT (scope, name) DO UPDATE
SET paused = true, changed_at = excluded.changed_at, reason = excluded.reason
WHERE NOT switches.paused
RETURNING scope, name, paused, changed_at, reason
