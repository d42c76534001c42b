-- 0012: worker liveness (tidings.liveness). Twin of sql/sqlite 0012. On PostgreSQL a
-- worker also holds a session-level advisory lock on a connection of its own, keyed
-- (hashtext(current_schema()), marker): pg_locks shows it gone the moment the worker's
-- backend ends, so a killed worker is seen at once; the heartbeat covers a worker cut
-- off from the network, whose backend can live on for minutes. IF NOT EXISTS: as 0003.
CREATE SEQUENCE IF NOT EXISTS worker_markers;
CREATE TABLE IF NOT EXISTS workers (
    worker_id    text PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    marker       bigint NOT NULL,
    backend_pid  integer NOT NULL,
    started_at   float8 NOT NULL,
    heartbeat_at float8 NOT NULL,
    ended_at     float8,
    ended_by     text,
    settled_at   float8
);
ALTER TABLE messages ADD COLUMN IF NOT EXISTS receiver text;
