-- Joining a caller's own transaction (notify with connection=): the checks run on the
-- caller's connection, and the store's search_path set around the writes.

-- name: join_identity
-- Which database a connection is on (the server's system identifier and the database's
-- name), where its search_path finds tables (the schemas, and the path written out
-- from them), and its search_path setting as it is. The store reads it once on its own
-- connection; a join reads it on the caller's, before anything is written.
SELECT current_database(),
       (SELECT system_identifier FROM pg_control_system())::text,
       current_schemas(false)::text[],
       coalesce((SELECT string_agg(quote_ident(s), ', ' ORDER BY n)
                 FROM unnest(current_schemas(false)) WITH ORDINALITY AS u (s, n)), ''),
       current_setting('search_path')

-- name: join_search_path
-- The search_path until the end of the caller's transaction (SET LOCAL), or of the
-- savepoint if it rolls back: the store's, for its writes, then the caller's again.
SELECT set_config('search_path', %(path)s, true)
