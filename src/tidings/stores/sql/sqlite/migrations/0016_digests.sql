-- 0016: digests (tidings.core.digest). A window per digest key collects items until it
-- closes; at most one window of a key is open (a partial unique index). An item is
-- known by (digest key, item key) for good: a replayed event is the item it was, in the
-- window it first joined; a cancelled item stays, marked, so a replay does not bring it
-- back. A window's ``items`` are the items in it, ``added`` every item it was given
-- (the next one's place: a cancel gives none back).
CREATE TABLE digest_windows (
    window_id   TEXT    PRIMARY KEY,
    digest_key  TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    opened_at   REAL    NOT NULL,
    closes_at   REAL    NOT NULL,
    window_s    REAL    NOT NULL,
    wait_s      REAL    NOT NULL,
    sliding     INTEGER NOT NULL,
    max_items   INTEGER NOT NULL,
    items       INTEGER NOT NULL,
    added       INTEGER NOT NULL,
    bytes       INTEGER NOT NULL,
    request     TEXT    NOT NULL,
    closed_at   REAL,
    intent_keys TEXT
) WITHOUT ROWID;
CREATE UNIQUE INDEX digest_windows_open ON digest_windows (digest_key) WHERE state = 'open';
CREATE INDEX digest_windows_key ON digest_windows (digest_key, opened_at);
CREATE INDEX digest_windows_due ON digest_windows (closes_at) WHERE state IN ('open', 'sealed');
CREATE INDEX digest_windows_closed ON digest_windows (closed_at) WHERE closed_at IS NOT NULL;
CREATE TABLE digest_items (
    digest_key   TEXT    NOT NULL,
    item_key     TEXT    NOT NULL,
    window_id    TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    added_at     REAL    NOT NULL,
    data         TEXT    NOT NULL,
    cancelled_at REAL,
    PRIMARY KEY (digest_key, item_key)
) WITHOUT ROWID;
CREATE INDEX digest_items_window ON digest_items (window_id, seq);
