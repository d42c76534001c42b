-- 0010: retention (tidings.retention). Twin of sql/sqlite 0010 for intents_created;
-- on PostgreSQL the events table also becomes range-partitioned by day on `at`, so a
-- prune drops a whole day of events instead of deleting its rows.
--
-- Intents by creation time: the ledger's age span, the prune's oldest-first batches,
-- and the partition rule (no intent older than a partition's end: drop it whole).
-- Intents themselves stay one table: a partitioned table's unique keys must include
-- the partition key, and the key's uniqueness alone is what makes a retried admission
-- a no-op.
CREATE INDEX intents_created ON intents (created_at);

-- No primary key, as since 0005 (nothing looks an event up by id): a partitioned
-- table's would have to be (id, at) and cost one more index entry per event. The
-- sequence still numbers events uniquely and in the order written (events_key).
--
-- The existing table is not copied: it becomes the partition of everything before the
-- UTC day after its newest event ("events_before_YYYYMMDD", from MINVALUE), keeping its
-- rows and indexes (the parent's indexes adopt them: no rebuild). Its identity becomes
-- a plain sequence default, shared by every partition; the insert names no id.
-- Attaching reads the old table once to check its range (no rewrite, no index build);
-- event writers wait for this migration's transaction: on a large table, migrate at a
-- quiet time (as for 0005).
ALTER TABLE events RENAME TO events_unpartitioned;
ALTER INDEX events_key RENAME TO events_unpartitioned_key;
ALTER INDEX events_outcomes_at RENAME TO events_unpartitioned_outcomes_at;

ALTER TABLE events_unpartitioned ALTER COLUMN id DROP IDENTITY;
CREATE SEQUENCE events_id_seq AS bigint;
SELECT setval('events_id_seq', coalesce((SELECT max(id) FROM events_unpartitioned), 0) + 1,
              false);
ALTER TABLE events_unpartitioned ALTER COLUMN id SET DEFAULT nextval('events_id_seq');

CREATE TABLE events (
    id                  bigint           NOT NULL DEFAULT nextval('events_id_seq'),
    key                 text             NOT NULL,
    channel             text             NOT NULL,
    type                text             NOT NULL,
    at                  double precision NOT NULL,
    state               text,
    attempt             integer,
    worker              text,
    message_id          text,
    provider_request_id text,
    detail              text
) PARTITION BY RANGE (at);
ALTER SEQUENCE events_id_seq OWNED BY events.id;

DO $$
DECLARE
    newest double precision;
    boundary double precision;
    name text;
BEGIN
    SELECT max(at) INTO newest FROM events_unpartitioned;
    IF newest IS NULL THEN
        DROP TABLE events_unpartitioned;
    ELSE
        boundary := (floor(newest / 86400) + 1) * 86400;
        name := 'events_before_' || to_char(to_timestamp(boundary) AT TIME ZONE 'UTC',
                                            'YYYYMMDD');
        EXECUTE format('ALTER TABLE events_unpartitioned RENAME TO %I', name);
        EXECUTE format('ALTER INDEX events_unpartitioned_key RENAME TO %I', name || '_key');
        EXECUTE format('ALTER INDEX events_unpartitioned_outcomes_at RENAME TO %I',
                       name || '_outcomes_at');
        EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) '
                       'TO (%s)', name, boundary);
    END IF;
END
$$;

-- Rows no day partition covers (before the pruner has created them) land here: an
-- insert never fails. Never dropped; a prune deletes its rows by key.
CREATE TABLE events_default PARTITION OF events DEFAULT;

CREATE INDEX events_key ON events (key, id);
CREATE INDEX events_outcomes_at ON events (at)
WHERE type IN ('accepted', 'rejected', 'rate_limited', 'transient_failure', 'dead',
               'uncertain', 'duplicate_observed');
