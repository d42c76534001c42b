-- 0014: the suppression list (tidings.core.suppression). An address (normalised:
-- tidings.core.addresses.normalize_address) is suppressed per channel kind (email,
-- sms) with the reason and where it came from; every send to it then ends
-- 'suppressed' with no provider call, and campaign admission skips it. A row is
-- removed only by an operator's audited removal.
CREATE TABLE suppressions (
    address    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    -- hard_bounce | complaint | unsubscribe | sms_stop | soft_bounces | manual
    reason     TEXT NOT NULL,
    -- "webhook:<provider>:<message id>", "intent:<key>", "operator:<who>", ...
    source     TEXT NOT NULL,
    created_at REAL NOT NULL,
    -- the intent whose report or answer suppressed the address, if one did
    key        TEXT,
    detail     TEXT,
    PRIMARY KEY (address, kind)
);
-- Soft bounces of an address, counted toward the soft_bounce_limit within the window
-- (tidings.config.settings.SuppressionSettings); older ones are pruned as new ones come.
CREATE TABLE suppression_strikes (
    address TEXT NOT NULL,
    kind    TEXT NOT NULL,
    source  TEXT NOT NULL,
    at      REAL NOT NULL,
    PRIMARY KEY (address, kind, source)
);
-- How a provider classed a bounce (hard | soft; NULL for other reports and bounces it
-- did not class), kept so that an orphan adopted later suppresses as it would have.
ALTER TABLE provider_events ADD COLUMN bounce TEXT;
-- Recipients a campaign occurrence skipped because their address is suppressed.
ALTER TABLE occurrences ADD COLUMN suppressed INTEGER NOT NULL DEFAULT 0;
