-- 0010: retention (tidings.retention). Intents by creation time: the ledger's age span
-- (tidings status) and the prune's oldest-first batches read it, and a prune's
-- candidates are all older than its cutoff. Twin of sql/postgresql 0010, which also
-- partitions the events table by time; SQLite prunes events row-wise in batches.
CREATE INDEX intents_created ON intents (created_at);
