-- 0004: provider webhooks. The PostgreSQL twin of sql/sqlite/migrations/0004_webhooks.sql:
-- provider events kept once per (provider, message id, type), joining their intent's
-- timeline beside "accepted" (the state does not change); key NULL while orphaned.

CREATE TABLE IF NOT EXISTS provider_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider    text             NOT NULL,
    message_id  text             NOT NULL,
    -- delivered | bounced | complained | failed
    type        text             NOT NULL,
    -- when the provider says it happened; received_at: when tidings recorded it
    at          double precision NOT NULL,
    received_at double precision NOT NULL,
    key         text,
    detail      text,
    UNIQUE (provider, message_id, type)
);
-- Orphans by arrival: the adoption sweep reads the recent ones, operators the oldest.
CREATE INDEX IF NOT EXISTS provider_events_orphaned ON provider_events (received_at)
    WHERE key IS NULL;

-- A provider's message id finds its intent. Partial: admission writes intents without
-- a receipt, so it never touches this index; only acceptance adds an entry.
CREATE INDEX IF NOT EXISTS intents_receipt ON intents (receipt) WHERE receipt IS NOT NULL;
