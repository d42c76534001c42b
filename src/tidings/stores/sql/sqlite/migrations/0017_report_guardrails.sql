-- 0017: the guardrails' bounce and complaint rates read the providers' reports of a
-- recent window by when they were recorded; this index holds only those reports.
CREATE INDEX provider_events_reports_at ON provider_events (received_at)
    WHERE type IN ('bounced', 'complained') AND key IS NOT NULL;
