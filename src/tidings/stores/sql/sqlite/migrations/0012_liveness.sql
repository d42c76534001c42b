-- 0012: worker liveness (tidings.liveness). Each worker process keeps a row here while
-- it runs: its host and pid (a peer on the same host sees the pid die at once) and a
-- heartbeat (a peer anywhere sees it stop). A row whose worker is gone is ended by the
-- reconciler, which then ends the worker's leases, frees its messages and marks the row
-- settled; only then may the worker register again under the same id. A queue
-- message names the worker that received it last (NULL: nobody, or released).
CREATE TABLE workers (
    worker_id    TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    -- PostgreSQL's advisory lock key and session (twin columns, unused here).
    marker       INTEGER,
    backend_pid  INTEGER,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    ended_at     REAL,
    ended_by     TEXT,
    settled_at   REAL
);
ALTER TABLE messages ADD COLUMN receiver TEXT;
