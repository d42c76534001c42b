-- 0013: twin of sql/postgresql 0013 (publish leases as one row per page). SQLite keeps
-- the lease in each intent's publish_lease_until: with one writer a page's lease
-- UPDATE does not hold back anyone else's statement the way it costs a server store
-- a new version of every row, so this table stays empty here; it exists so both
-- dialects have the same tables.
CREATE TABLE IF NOT EXISTS publish_leases (
    id    INTEGER PRIMARY KEY,
    until REAL NOT NULL,
    keys  TEXT NOT NULL
);
