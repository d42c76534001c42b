-- 0021: lanes (tidings.core.lanes). Each intent and its queue message carry the number
-- of their lane, and a receive walks the ready messages lane by lane, oldest first in
-- each: the ready index leads with the lane. Existing rows are lane 0 (the first).
-- Adding a column with a constant default rewrites nothing. Twin of sql/postgresql 0021.
ALTER TABLE intents ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS messages_ready;
CREATE INDEX messages_ready ON messages (queue, lane, available_at);
