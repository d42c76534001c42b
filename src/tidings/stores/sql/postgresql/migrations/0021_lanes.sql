-- 0021: lanes (tidings.core.lanes). Each intent and its queue message carry the number
-- of their lane, and a receive walks the ready messages lane by lane, oldest first in
-- each: the ready index leads with the lane. Existing rows are lane 0 (the first).
-- A column with a constant default rewrites nothing (PostgreSQL 11 and later). Twin of
-- sql/sqlite 0021.
ALTER TABLE intents ADD COLUMN IF NOT EXISTS lane smallint NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN IF NOT EXISTS lane smallint NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS messages_ready;
CREATE INDEX IF NOT EXISTS messages_ready ON messages (queue, lane, available_at, id);
