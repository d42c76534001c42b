-- Connection setup and transaction control for SqliteDatabase.

-- name: connect
-- Run once per connection (a script: several statements). WAL lets readers run
-- beside the one writer; NORMAL sync is durable across application crashes in WAL
-- mode; the busy timeout makes opening wait for another process (switching a new file
-- to WAL needs a moment alone with it).
PRAGMA busy_timeout = 15000;
PRAGMA journal_mode = WAL;
PRAGMA synchronous = NORMAL;
PRAGMA foreign_keys = ON;
-- Key lists arrive as json_each(...) IN-lists; their temporary B-trees stay in memory.
PRAGMA temp_store = MEMORY;
-- Up to 32 MiB of page cache (the default 2 MiB thrashes on a page of admissions).
PRAGMA cache_size = -32768;

-- name: busy_wait_ours
-- Around BEGIN IMMEDIATE only: no sleep in SQLite's busy handler (1, 2, 5 … 100 ms
-- between tries); SqliteDatabase tries again a fraction of a millisecond apart, so the
-- next writer starts soon after the lock is free.
PRAGMA busy_timeout = 0

-- name: busy_wait_sqlite
-- Everything else waits on SQLite's busy handler as opened (a read that meets the
-- recovery of a killed process's WAL index waits for it, rather than failing).
PRAGMA busy_timeout = 15000

-- name: begin_write
-- Take the write lock up front so two processes serialize at BEGIN instead of
-- failing later when a read transaction tries to upgrade.
BEGIN IMMEDIATE

-- name: begin_read
BEGIN DEFERRED

-- name: commit
COMMIT

-- name: rollback
ROLLBACK
