-- 0003: the operator API: API tokens (only their hashes), the trigger endpoint's replay
-- guard and per-occurrence trigger log, and the publish endpoint's idempotency keys.
-- The PostgreSQL twin of sql/sqlite/migrations/0003_api.sql. IF NOT EXISTS: a database
-- whose migration records were dropped without these tables is migrated again cleanly.

-- A token is "tid_<id>_<secret>", shown once; only sha256(secret) is kept.
-- scopes: space-separated (viewer, operator, trigger, publish).
CREATE TABLE IF NOT EXISTS api_tokens (
    id          text             NOT NULL PRIMARY KEY,
    name        text             NOT NULL,
    scopes      text             NOT NULL,
    secret_hash text             NOT NULL,
    created_at  double precision NOT NULL,
    revoked_at  double precision
);

-- Signed trigger requests seen within the timestamp tolerance: a second request with
-- the same signature is a replay. Rows past expires_at are pruned on the next claim.
CREATE TABLE IF NOT EXISTS api_signatures (
    signature  text             NOT NULL PRIMARY KEY,
    expires_at double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS api_signatures_expiry ON api_signatures (expires_at);

-- How often each (campaign, logical date) was triggered over HTTP.
CREATE TABLE IF NOT EXISTS api_triggers (
    campaign     text             NOT NULL,
    logical_date text             NOT NULL,
    count        integer          NOT NULL,
    first_at     double precision NOT NULL,
    last_at      double precision NOT NULL,
    PRIMARY KEY (campaign, logical_date)
);

-- The first answer given to each publish Idempotency-Key, with the hash of the request
-- it answered: the same key and request get this answer again, another request a 409.
CREATE TABLE IF NOT EXISTS api_idempotency (
    key          text             NOT NULL PRIMARY KEY,
    request_hash text             NOT NULL,
    status       integer          NOT NULL,
    body         text             NOT NULL,
    created_at   double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS api_idempotency_created ON api_idempotency (created_at);
