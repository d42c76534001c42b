-- 0013: publish leases of the outbox relay as one row per page (PostgreSQL only; SQLite
-- keeps the per-intent publish_lease_until). A lease written into every intent of a
-- page was an UPDATE of each row, a new row version with an entry in each of the
-- table's indexes, which cost about as much as the UPDATE that marks it enqueued: the
-- relay wrote every intent twice. Here a page's lease is one row holding its keys;
-- intent_claim_publish skips the keys of live leases, intent_extend_publish moves one,
-- intent_release_publish ends one. publish_lease_until stays for leases written at
-- admission. IF NOT EXISTS: as 0003.
CREATE TABLE IF NOT EXISTS publish_leases (
    id    bigserial PRIMARY KEY,
    until float8 NOT NULL,
    keys  text[] NOT NULL
);
