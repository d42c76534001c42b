-- The migration runner's own bookkeeping. Parameters use psycopg's %(name)s style.

-- name: migrations_lock
-- Held until the end of the transaction: concurrent migrators (processes, machines)
-- take turns, so each version is applied exactly once. The key is arbitrary but fixed
-- ("tidings" in ASCII).
SELECT pg_advisory_xact_lock(7235449129957419891)

-- name: migrations_table_exists
SELECT to_regclass('schema_migrations') IS NOT NULL

-- name: migrations_create
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer          NOT NULL PRIMARY KEY,
    applied_at double precision NOT NULL
)

-- name: migrations_applied
SELECT version FROM schema_migrations ORDER BY version

-- name: migration_is_applied
SELECT 1 FROM schema_migrations WHERE version = %(version)s

-- name: migration_record
INSERT INTO schema_migrations (version, applied_at) VALUES (%(version)s, %(applied_at)s)

-- name: tables_present
-- Which of the names are tables or views in the schema new tables go to (the first of
-- the search path).
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace
  AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relname = ANY(%(names)s)

-- name: migrations_columns
SELECT a.attname FROM pg_attribute a
WHERE a.attrelid = to_regclass('schema_migrations') AND a.attnum > 0 AND NOT a.attisdropped
