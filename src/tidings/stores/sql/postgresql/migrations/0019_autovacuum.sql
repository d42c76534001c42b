-- 0019: autovacuum for the two tables every delivery updates, by a count of dead rows
-- rather than a share of the table. A delivery leaves about three dead versions of its
-- intent (claim, start mark, outcome) and two of its message (receive, ack); with the
-- default scale factor (0.2) a ledger of 10 million intents was vacuumed only after 2
-- million dead rows (60 million at 300 million) while every claim read it, and the
-- queue's table after a fifth of its size in dead rows. Storage parameters only: no
-- rewrite, no lock beyond a moment's. PostgreSQL only (SQLite has no autovacuum).
ALTER TABLE intents SET (autovacuum_vacuum_scale_factor = 0.01,
                         autovacuum_vacuum_threshold = 10000,
                         autovacuum_analyze_scale_factor = 0.02);
ALTER TABLE messages SET (autovacuum_vacuum_scale_factor = 0.0,
                          autovacuum_vacuum_threshold = 2000,
                          autovacuum_vacuum_cost_delay = 0);
