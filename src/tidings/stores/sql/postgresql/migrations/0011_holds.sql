-- 0011: delivery holds per channel, campaign or occurrence (tidings.holds). A held
-- scope's intents are parked by the worker that claims them (state 'parked') and
-- republished by the release; the row is the hold, removed by the release. Twin of
-- sql/sqlite 0011.
CREATE TABLE IF NOT EXISTS holds (
    scope   text             NOT NULL,
    name    text             NOT NULL,
    held_at double precision NOT NULL,
    held_by text             NOT NULL,
    reason  text,
    PRIMARY KEY (scope, name)
);
-- Parked intents page by key (a release), by expiry and by the time they were parked
-- (the holds sweep) without reading any other intent.
CREATE INDEX IF NOT EXISTS intents_parked_key ON intents (key) WHERE state = 'parked';
CREATE INDEX IF NOT EXISTS intents_parked_expiry ON intents (expires_at)
    WHERE state = 'parked';
CREATE INDEX IF NOT EXISTS intents_parked_updated ON intents (updated_at)
    WHERE state = 'parked';
