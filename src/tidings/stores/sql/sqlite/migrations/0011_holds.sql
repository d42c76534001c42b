-- 0011: delivery holds per channel, campaign or occurrence (tidings.holds). A held
-- scope's intents are parked by the worker that claims them (state 'parked') and
-- republished by the release; the row is the hold, removed by the release.
CREATE TABLE holds (
    scope   TEXT NOT NULL,
    name    TEXT NOT NULL,
    held_at REAL NOT NULL,
    held_by TEXT NOT NULL,
    reason  TEXT,
    PRIMARY KEY (scope, name)
);
-- Parked intents page by key (a release), by expiry and by the time they were parked
-- (the holds sweep) without reading any other intent.
CREATE INDEX intents_parked_key ON intents (key) WHERE state = 'parked';
CREATE INDEX intents_parked_expiry ON intents (expires_at) WHERE state = 'parked';
CREATE INDEX intents_parked_updated ON intents (updated_at) WHERE state = 'parked';
