-- 0016: digests (tidings.core.digest). A window per digest key collects items until it
-- closes; at most one window of a key is open (a partial unique index: two writers that
-- open one at once make one, the second waits for the first and joins it). An item is
-- known by (digest key, item key) for good: a replayed event is the item it was, in the
-- window it first joined; a cancelled item stays, marked, so a replay does not bring it
-- back. A window's ``items`` are the items in it, ``added`` every item it was given
-- (the next one's place: a cancel gives none back). Twin of sql/sqlite 0016; IF NOT EXISTS: as 0003.
CREATE TABLE IF NOT EXISTS digest_windows (
    window_id   text             PRIMARY KEY,
    digest_key  text             NOT NULL,
    state       text             NOT NULL,
    opened_at   double precision NOT NULL,
    closes_at   double precision NOT NULL,
    window_s    double precision NOT NULL,
    wait_s      double precision NOT NULL,
    sliding     boolean          NOT NULL,
    max_items   integer          NOT NULL,
    items       integer          NOT NULL,
    added       integer          NOT NULL,
    bytes       integer          NOT NULL,
    request     text             NOT NULL,
    closed_at   double precision,
    intent_keys text
);
CREATE UNIQUE INDEX IF NOT EXISTS digest_windows_open
    ON digest_windows (digest_key) WHERE state = 'open';
CREATE INDEX IF NOT EXISTS digest_windows_key ON digest_windows (digest_key, opened_at);
CREATE INDEX IF NOT EXISTS digest_windows_due
    ON digest_windows (closes_at) WHERE state IN ('open', 'sealed');
CREATE INDEX IF NOT EXISTS digest_windows_closed
    ON digest_windows (closed_at) WHERE closed_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS digest_items (
    digest_key   text             NOT NULL,
    item_key     text             NOT NULL,
    window_id    text             NOT NULL,
    seq          integer          NOT NULL,
    added_at     double precision NOT NULL,
    data         text             NOT NULL,
    cancelled_at double precision,
    PRIMARY KEY (digest_key, item_key)
);
CREATE INDEX IF NOT EXISTS digest_items_window ON digest_items (window_id, seq);
