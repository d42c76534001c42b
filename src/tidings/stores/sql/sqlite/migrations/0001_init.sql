-- 0001: the ledger (intents, events), occurrences, admission switches, pacer state,
-- and the embedded transport's queue tables.

-- One row per logical delivery. State transitions (see tidings.states):
--   selected  <- admission (intent_admit)          -> enqueued (relay), claimed, cancelled, expired
--   enqueued  <- relay (intent_mark_enqueued)       -> claimed (worker), cancelled, expired
--   claimed   <- worker (intent_claim_many)         -> accepted, retryable, uncertain, rejected, dead, ...
--   retryable <- worker outcome or expired lease    -> enqueued, claimed, cancelled, expired, dead
--   uncertain <- worker outcome                     -> accepted | retryable (reconciler)
--   accepted / delivered / bounced / complained / rejected / dead / cancelled / expired: terminal
-- WITHOUT ROWID: the key is the only way rows are addressed, so the table is stored
-- in key order and admission writes one B-tree instead of a table plus a key index.
CREATE TABLE intents (
    key                 TEXT    NOT NULL PRIMARY KEY,
    channel             TEXT    NOT NULL,
    recipient_id        TEXT    NOT NULL,
    address             TEXT    NOT NULL,
    template            TEXT    NOT NULL,
    data                TEXT    NOT NULL DEFAULT '{}',
    campaign            TEXT,
    occurrence          TEXT,
    state               TEXT    NOT NULL,
    due_at              REAL    NOT NULL,
    expires_at          REAL,
    created_at          REAL    NOT NULL,
    updated_at          REAL    NOT NULL,
    selected_at         REAL,
    enqueued_at         REAL,
    accepted_at         REAL,
    finished_at         REAL,
    attempts            INTEGER NOT NULL DEFAULT 0,
    failures            INTEGER NOT NULL DEFAULT 0,
    lease_owner         TEXT,
    -- fencing token: grows by one per claim and never goes back
    lease_token         INTEGER NOT NULL DEFAULT 0,
    lease_expires_at    REAL,
    -- the outbox relay's claim on a selected intent (not a state: nothing else reads it)
    publish_lease_until REAL,
    next_attempt_at     REAL,
    receipt             TEXT,
    provider_request_id TEXT,
    disposition         TEXT,
    reason              TEXT,
    cancel_requested    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The one secondary index, kept alone because admission writes it for every intent and
-- every state change moves an entry: intents in a state by due time. It serves the
-- outbox relay (selected, due first) and the sweeps (claimed, retryable, uncertain,
-- enqueued: each scanned in due order until a page is full). updated_at rides along so
-- the sweeps' "untouched since" filter is read from the index, not from each row; a
-- state change rewrites the entry anyway, so it costs nothing more.
CREATE INDEX intents_state ON intents (state, due_at, updated_at);

-- Append-only audit trail.
CREATE TABLE events (
    id                  INTEGER PRIMARY KEY,
    key                 TEXT    NOT NULL,
    channel             TEXT    NOT NULL,
    type                TEXT    NOT NULL,
    at                  REAL    NOT NULL,
    state               TEXT,
    attempt             INTEGER,
    worker              TEXT,
    message_id          TEXT,
    provider_request_id TEXT,
    detail              TEXT
);
CREATE INDEX events_key ON events (key);

-- One logical date of a campaign; status: admitting | done | skipped.
CREATE TABLE occurrences (
    id           TEXT    NOT NULL PRIMARY KEY,
    campaign     TEXT    NOT NULL,
    logical_at   REAL    NOT NULL,
    logical_date TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    high_water   TEXT,
    members      INTEGER NOT NULL DEFAULT 0,
    admitted     INTEGER NOT NULL DEFAULT 0,
    skipped      INTEGER NOT NULL DEFAULT 0,
    passes       INTEGER NOT NULL DEFAULT 0,
    created_at   REAL    NOT NULL,
    finished_at  REAL,
    reason       TEXT
);
CREATE INDEX occurrences_campaign ON occurrences (campaign, logical_at);

-- Admission switches; scope is 'campaign' or 'channel'.
CREATE TABLE switches (
    scope      TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    paused     INTEGER NOT NULL,
    changed_at REAL    NOT NULL,
    reason     TEXT,
    PRIMARY KEY (scope, name)
);

-- Pacer state per channel, shared by every worker process (JSON owned by tidings.pacing;
-- its own timestamps live inside the document).
CREATE TABLE pacer_state (
    channel TEXT NOT NULL PRIMARY KEY,
    state   TEXT NOT NULL
);

-- The embedded transport. AUTOINCREMENT: a receipt names its row id and ack deletes
-- by id alone, so an id must never be reused by a later message.
-- available_at: visible from then on; leased = 1 while hidden by a receive (in flight),
-- 0 while hidden by a publish delay or a nack (delayed).
CREATE TABLE messages (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue         TEXT    NOT NULL,
    message_id    TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    available_at  REAL    NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receive_token INTEGER NOT NULL DEFAULT 0,
    leased        INTEGER NOT NULL DEFAULT 0,
    enqueued_at   REAL    NOT NULL
);
CREATE INDEX messages_ready ON messages (queue, available_at);
-- The reconciler asks whether an enqueued intent still has its message (contains).
CREATE INDEX messages_message_id ON messages (message_id);

CREATE TABLE dead_letters (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    queue         TEXT    NOT NULL,
    message_id    TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    reason        TEXT    NOT NULL,
    receive_count INTEGER NOT NULL,
    dead_at       REAL    NOT NULL
);
CREATE INDEX dead_letters_queue ON dead_letters (queue, dead_at);
