-- 0002: recipient preferences per channel (see tidings.preferences). The PostgreSQL
-- twin of sql/sqlite/migrations/0002_preferences.sql: same table, columns and meaning.
-- quiet_start/quiet_end are "HH:MM" wall-clock times in the IANA time zone `timezone`,
-- both or neither; updated_at (epoch seconds, passed in) says when the recipient's
-- wishes last changed.
CREATE TABLE preferences (
    recipient_id text             NOT NULL,
    channel      text             NOT NULL,
    opted_out    boolean          NOT NULL DEFAULT false,
    quiet_start  text,
    quiet_end    text,
    timezone     text             NOT NULL DEFAULT 'UTC',
    updated_at   double precision NOT NULL,
    PRIMARY KEY (recipient_id, channel),
    CHECK ((quiet_start IS NULL) = (quiet_end IS NULL))
);
