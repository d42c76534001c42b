-- The migration runner's own bookkeeping.

-- name: migrations_table_exists
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'

-- name: migrations_create
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    applied_at REAL    NOT NULL
)

-- name: migrations_applied
SELECT version FROM schema_migrations ORDER BY version

-- name: migration_is_applied
SELECT 1 FROM schema_migrations WHERE version = ?

-- name: migration_record
INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)

-- name: tables_present
-- Which of the names (a JSON array) are tables or views of this database.
SELECT name FROM sqlite_master
WHERE type IN ('table', 'view') AND lower(name) IN (SELECT value FROM json_each(?))

-- name: migrations_columns
SELECT name FROM pragma_table_info('schema_migrations')
