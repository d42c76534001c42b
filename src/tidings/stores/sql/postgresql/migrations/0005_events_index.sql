-- 0005: one index on events instead of two. Nothing looks an event up by id; a key's
-- timeline reads its events in id order, which an index on (key, id) serves alone.
-- Admission and every outcome append events, so each saves one index entry per event.
-- The identity still numbers events uniquely (GENERATED ALWAYS, from its sequence).
-- On a large table the new index is built under a write lock: migrate at a quiet time.
CREATE INDEX events_key_id ON events (key, id);
DROP INDEX events_key;
ALTER INDEX events_key_id RENAME TO events_key;
ALTER TABLE events DROP CONSTRAINT events_pkey;
