-- Worker liveness (tidings.liveness): one row per running worker process, and a
-- session-level advisory lock (hashtext(current_schema()), marker) held by the worker on
-- a connection of its own while it runs. A row is running (ended_at NULL), ended
-- (declared gone; its leases and messages being taken back) or settled (taken back;
-- the worker may register again).

-- name: worker_register
-- A worker that comes back under the same id starts a fresh row with a fresh marker
-- once the row it had is settled (no row returned: not yet), and takes the marker's
-- lock on this same connection (a session lock: held past the commit). The row is
-- visible only at the commit, by when the lock is held: no peer sees one without the
-- other.
WITH registered AS (
    INSERT INTO workers (worker_id, host, pid, marker, backend_pid, started_at, heartbeat_at)
    VALUES (%(worker_id)s, %(host)s, %(pid)s, nextval('worker_markers'), pg_backend_pid(),
            %(now)s, %(now)s)
    ON CONFLICT (worker_id) DO UPDATE
    SET host = excluded.host, pid = excluded.pid, marker = excluded.marker,
        backend_pid = excluded.backend_pid, started_at = excluded.started_at,
        heartbeat_at = excluded.heartbeat_at, ended_at = NULL, ended_by = NULL,
        settled_at = NULL
    WHERE workers.ended_at IS NULL OR workers.settled_at IS NOT NULL
    RETURNING marker
)
SELECT pg_try_advisory_lock(hashtext(current_schema()), marker::int) FROM registered

-- name: worker_beat
-- No row changed: the worker was declared gone (or removed) meanwhile.
UPDATE workers SET heartbeat_at = %(now)s
WHERE worker_id = %(worker_id)s AND ended_at IS NULL

-- name: worker_list
-- Workers not settled (running ones, and ended ones whose work is still being taken
-- back), and whether each one's marker lock is still held by a live backend.
SELECT w.worker_id, w.host, w.pid, w.heartbeat_at, w.ended_at,
       EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                 AND l.database = (SELECT oid FROM pg_database
                                   WHERE datname = current_database())
                 AND l.classid = hashtext(current_schema())::oid
                 AND l.objid = w.marker::int::oid)
FROM workers w
WHERE w.settled_at IS NULL
ORDER BY w.worker_id

-- name: worker_end
-- Compare-and-set on the heartbeat seen: a worker that beat meanwhile is not ended.
UPDATE workers SET ended_at = %(now)s, ended_by = %(ended_by)s
WHERE worker_id = %(worker_id)s AND ended_at IS NULL AND heartbeat_at = %(heartbeat_at)s

-- name: worker_settle
UPDATE workers SET settled_at = %(now)s
WHERE worker_id = %(worker_id)s AND ended_at IS NOT NULL AND settled_at IS NULL

-- name: worker_ended
SELECT ended_at, ended_by, settled_at FROM workers WHERE worker_id = %(worker_id)s

-- name: worker_remove
-- A clean stop: the row goes and the lock with it.
WITH removed AS (
    DELETE FROM workers WHERE worker_id = %(worker_id)s RETURNING marker
)
SELECT pg_advisory_unlock(hashtext(current_schema()), marker::int) FROM removed

-- name: worker_disconnect
-- A worker declared gone while its backends live on (cut off from the network, and the
-- server has not noticed yet): end every backend of its process (application_name, see
-- tidings.liveness.application_name), so what they hold goes now: row locks of a
-- transaction cut off mid-way, and the marker lock.
SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity
WHERE (application_name = %(application_name)s
       OR starts_with(application_name, %(application_name)s || ' '))
  AND pid <> pg_backend_pid()

-- name: worker_relock
-- The marker's connection was lost while the worker lives (a server restart, a network
-- blip): take its lock again on a new connection, unless it was declared gone (no row
-- returned) or the old session still holds it (false).
UPDATE workers SET backend_pid = pg_backend_pid()
WHERE worker_id = %(worker_id)s AND ended_at IS NULL
RETURNING pg_try_advisory_lock(hashtext(current_schema()), marker::int)
