-- 0002: recipient preferences per channel (see tidings.preferences).
-- Read at send time by the worker, a batch of (recipient_id, channel) pairs at once;
-- written by operators and the API. quiet_start/quiet_end are "HH:MM" wall-clock times
-- in the IANA time zone `timezone`, both or neither; updated_at says when the
-- recipient's wishes last changed (an opt-out's date matters to compliance).
CREATE TABLE preferences (
    recipient_id TEXT    NOT NULL,
    channel      TEXT    NOT NULL,
    opted_out    INTEGER NOT NULL DEFAULT 0,
    quiet_start  TEXT,
    quiet_end    TEXT,
    timezone     TEXT    NOT NULL DEFAULT 'UTC',
    updated_at   REAL    NOT NULL,
    PRIMARY KEY (recipient_id, channel),
    CHECK ((quiet_start IS NULL) = (quiet_end IS NULL))
) WITHOUT ROWID;
