-- 0007: the guardrails read the outcomes of a recent window (tidings.guardrails); an
-- index on the time of outcome events alone, so admission's own events add no entry.
-- Twin of sql/postgresql 0007.
CREATE INDEX events_outcomes_at ON events (at)
WHERE type IN ('accepted', 'rejected', 'rate_limited', 'transient_failure', 'dead',
               'uncertain', 'duplicate_observed');
