-- 0001: the ledger (intents, events), occurrences, admission switches, pacer state,
-- and the embedded transport's queue tables. The PostgreSQL twin of
-- sql/sqlite/migrations/0001_init.sql: same tables, columns and meaning; times are
-- float8 seconds since the epoch, always passed in by the caller (never now()).

-- One row per logical delivery (state transitions: see tidings.states).
CREATE TABLE intents (
    key                 text             NOT NULL PRIMARY KEY,
    channel             text             NOT NULL,
    recipient_id        text             NOT NULL,
    address             text             NOT NULL,
    template            text             NOT NULL,
    data                text             NOT NULL DEFAULT '{}',
    campaign            text,
    occurrence          text,
    state               text             NOT NULL,
    due_at              double precision NOT NULL,
    expires_at          double precision,
    created_at          double precision NOT NULL,
    updated_at          double precision NOT NULL,
    selected_at         double precision,
    enqueued_at         double precision,
    accepted_at         double precision,
    finished_at         double precision,
    attempts            integer          NOT NULL DEFAULT 0,
    failures            integer          NOT NULL DEFAULT 0,
    lease_owner         text,
    -- fencing token: grows by one per claim and never goes back
    lease_token         bigint           NOT NULL DEFAULT 0,
    lease_expires_at    double precision,
    -- the outbox relay's claim on a selected intent (not a state: nothing else reads it)
    publish_lease_until double precision,
    next_attempt_at     double precision,
    receipt             text,
    provider_request_id text,
    disposition         text,
    reason              text,
    cancel_requested    boolean          NOT NULL DEFAULT false
);
-- Intents in a state by due time: the outbox relay and the sweeps.
CREATE INDEX intents_state ON intents (state, due_at, updated_at);

-- Append-only audit trail; the identity orders events of one key as written.
CREATE TABLE events (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
);
CREATE INDEX events_key ON events (key);

-- One logical date of a campaign; status: admitting | done | skipped.
CREATE TABLE occurrences (
    id           text             NOT NULL PRIMARY KEY,
    campaign     text             NOT NULL,
    logical_at   double precision NOT NULL,
    logical_date text             NOT NULL,
    kind         text             NOT NULL,
    status       text             NOT NULL,
    high_water   text,
    members      integer          NOT NULL DEFAULT 0,
    admitted     integer          NOT NULL DEFAULT 0,
    skipped      integer          NOT NULL DEFAULT 0,
    passes       integer          NOT NULL DEFAULT 0,
    created_at   double precision NOT NULL,
    finished_at  double precision,
    reason       text
);
CREATE INDEX occurrences_campaign ON occurrences (campaign, logical_at);

-- Admission switches; scope is 'campaign' or 'channel'.
CREATE TABLE switches (
    scope      text             NOT NULL,
    name       text             NOT NULL,
    paused     boolean          NOT NULL,
    changed_at double precision NOT NULL,
    reason     text,
    PRIMARY KEY (scope, name)
);

-- Pacer state per channel, shared by every worker process on every machine (JSON text
-- owned by tidings.pacing). NULL only inside the transaction that creates the row.
CREATE TABLE pacer_state (
    channel text NOT NULL PRIMARY KEY,
    state   text
);

-- The embedded transport. An identity never hands out an id twice: a receipt names its
-- row id and ack deletes by id alone. leased = true while hidden by a receive.
CREATE TABLE messages (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue         text             NOT NULL,
    message_id    text             NOT NULL,
    body          text             NOT NULL,
    available_at  double precision NOT NULL,
    receive_count integer          NOT NULL DEFAULT 0,
    receive_token bigint           NOT NULL DEFAULT 0,
    leased        boolean          NOT NULL DEFAULT false,
    enqueued_at   double precision NOT NULL
);
CREATE INDEX messages_ready ON messages (queue, available_at, id);
-- The reconciler asks whether an enqueued intent still has its message (contains).
CREATE INDEX messages_message_id ON messages (message_id);

CREATE TABLE dead_letters (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue         text             NOT NULL,
    message_id    text             NOT NULL,
    body          text             NOT NULL,
    reason        text             NOT NULL,
    receive_count integer          NOT NULL,
    dead_at       double precision NOT NULL
);
CREATE INDEX dead_letters_queue ON dead_letters (queue, dead_at);
