-- Worker liveness (tidings.liveness): one row per running worker process. A row is
-- running (ended_at NULL), ended (declared gone; its leases and messages being taken
-- back) or settled (taken back; the worker may register again).

-- name: worker_register
-- A worker that comes back under the same id starts a fresh row, once the row it had
-- is settled: no row changed means not yet.
INSERT INTO workers (worker_id, host, pid, started_at, heartbeat_at)
VALUES (:worker_id, :host, :pid, :now, :now)
ON CONFLICT (worker_id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at, ended_at = NULL, ended_by = NULL, settled_at = NULL
WHERE workers.ended_at IS NULL OR workers.settled_at IS NOT NULL

-- name: worker_beat
-- No row changed: the worker was declared gone (or removed) meanwhile.
UPDATE workers SET heartbeat_at = :now WHERE worker_id = :worker_id AND ended_at IS NULL

-- name: worker_list
-- Workers not settled: running ones, and ended ones whose work is still being taken
-- back. SQLite has no marker beside the heartbeat (NULL).
SELECT worker_id, host, pid, heartbeat_at, ended_at, NULL FROM workers
WHERE settled_at IS NULL
ORDER BY worker_id

-- name: worker_end
-- Compare-and-set on the heartbeat seen: a worker that beat meanwhile is not ended.
UPDATE workers SET ended_at = :now, ended_by = :ended_by
WHERE worker_id = :worker_id AND ended_at IS NULL AND heartbeat_at = :heartbeat_at

-- name: worker_settle
UPDATE workers SET settled_at = :now
WHERE worker_id = :worker_id AND ended_at IS NOT NULL AND settled_at IS NULL

-- name: worker_ended
SELECT ended_at, ended_by, settled_at FROM workers WHERE worker_id = :worker_id

-- name: worker_remove
DELETE FROM workers WHERE worker_id = :worker_id
