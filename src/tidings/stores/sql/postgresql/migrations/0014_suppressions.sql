-- 0014: the suppression list (tidings.core.suppression). An address (normalised:
-- tidings.core.addresses.normalize_address) is suppressed per channel kind (email,
-- sms) with the reason and where it came from; every send to it then ends
-- 'suppressed' with no provider call, and campaign admission skips it. A row is
-- removed only by an operator's audited removal. Twin of sql/sqlite 0014; IF NOT
-- EXISTS: as 0003.
CREATE TABLE IF NOT EXISTS suppressions (
    address    text             NOT NULL,
    kind       text             NOT NULL,
    -- hard_bounce | complaint | unsubscribe | sms_stop | soft_bounces | manual
    reason     text             NOT NULL,
    -- "webhook:<provider>:<message id>", "intent:<key>", "operator:<who>", ...
    source     text             NOT NULL,
    created_at double precision NOT NULL,
    -- the intent whose report or answer suppressed the address, if one did
    key        text,
    detail     text,
    PRIMARY KEY (address, kind)
);
-- Soft bounces of an address, counted toward the soft_bounce_limit within the window
-- (tidings.config.settings.SuppressionSettings); older ones are pruned as new ones come.
CREATE TABLE IF NOT EXISTS suppression_strikes (
    address text             NOT NULL,
    kind    text             NOT NULL,
    source  text             NOT NULL,
    at      double precision NOT NULL,
    PRIMARY KEY (address, kind, source)
);
-- How a provider classed a bounce (hard | soft; NULL for other reports and bounces it
-- did not class), kept so that an orphan adopted later suppresses as it would have.
ALTER TABLE provider_events ADD COLUMN IF NOT EXISTS bounce text;
-- Recipients a campaign occurrence skipped because their address is suppressed.
ALTER TABLE occurrences ADD COLUMN IF NOT EXISTS suppressed integer NOT NULL DEFAULT 0;
