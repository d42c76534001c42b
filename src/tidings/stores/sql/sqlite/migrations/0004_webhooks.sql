-- 0004: provider webhooks. What a provider reports after accepting a message
-- (delivered, bounced, complained, failed) is kept once per (provider, message id,
-- type) and joins its intent's timeline as an event, beside "accepted": the intent's
-- state does not change. An event whose message id is no intent's receipt (yet) is
-- kept with key NULL, orphaned, until an adoption sweep or an operator finds it.

CREATE TABLE provider_events (
    id          INTEGER PRIMARY KEY,
    provider    TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    -- delivered | bounced | complained | failed
    type        TEXT NOT NULL,
    -- when the provider says it happened; received_at: when tidings recorded it
    at          REAL NOT NULL,
    received_at REAL NOT NULL,
    key         TEXT,
    detail      TEXT,
    UNIQUE (provider, message_id, type)
);
-- Orphans by arrival: the adoption sweep reads the recent ones, operators the oldest.
CREATE INDEX provider_events_orphaned ON provider_events (received_at) WHERE key IS NULL;

-- A provider's message id finds its intent. Partial: admission writes intents without
-- a receipt, so it never touches this index; only acceptance adds an entry.
CREATE INDEX intents_receipt ON intents (receipt) WHERE receipt IS NOT NULL;
