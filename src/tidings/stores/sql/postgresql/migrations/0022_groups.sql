-- 0022: fair share among groups inside a lane (tidings.core.fair). Each intent and its
-- queue message carry a group key ('' for none: a tenant, a sender domain). The ready
-- index leads with the lane and the group: a receive takes the oldest ready messages of
-- one group of one lane (all of them '' where no group is named), and the groups of a
-- lane are walked one index probe a group. Twin of sql/sqlite 0022.
ALTER TABLE intents ADD COLUMN IF NOT EXISTS group_key text NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN IF NOT EXISTS group_key text NOT NULL DEFAULT '';
DROP INDEX IF EXISTS messages_ready;
CREATE INDEX IF NOT EXISTS messages_ready ON messages (queue, lane, group_key, available_at, id);
