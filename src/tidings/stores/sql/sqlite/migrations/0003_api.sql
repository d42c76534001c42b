-- 0003: the operator API: API tokens (only their hashes), the trigger endpoint's replay
-- guard and per-occurrence trigger log, and the publish endpoint's idempotency keys.
-- Independent of 0002 (applied in version order; each version once).

-- A token is "tid_<id>_<secret>", shown once; only sha256(secret) is kept.
-- scopes: space-separated (viewer, operator, trigger, publish).
CREATE TABLE api_tokens (
    id          TEXT NOT NULL PRIMARY KEY,
    name        TEXT NOT NULL,
    scopes      TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created_at  REAL NOT NULL,
    revoked_at  REAL
);

-- Signed trigger requests seen within the timestamp tolerance: a second request with
-- the same signature is a replay. Rows past expires_at are pruned on the next claim.
CREATE TABLE api_signatures (
    signature  TEXT NOT NULL PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE INDEX api_signatures_expiry ON api_signatures (expires_at);

-- How often each (campaign, logical date) was triggered over HTTP.
CREATE TABLE api_triggers (
    campaign     TEXT    NOT NULL,
    logical_date TEXT    NOT NULL,
    count        INTEGER NOT NULL,
    first_at     REAL    NOT NULL,
    last_at      REAL    NOT NULL,
    PRIMARY KEY (campaign, logical_date)
);

-- The first answer given to each publish Idempotency-Key, with the hash of the request
-- it answered: the same key and request get this answer again, another request a 409.
CREATE TABLE api_idempotency (
    key          TEXT    NOT NULL PRIMARY KEY,
    request_hash TEXT    NOT NULL,
    status       INTEGER NOT NULL,
    body         TEXT    NOT NULL,
    created_at   REAL    NOT NULL
);
CREATE INDEX api_idempotency_created ON api_idempotency (created_at);
