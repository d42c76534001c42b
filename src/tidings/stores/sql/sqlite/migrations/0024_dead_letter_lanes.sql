-- 0024: a dead letter keeps the lane and the group its message was in, so that a
-- redrive of a message that is no intent's (an intent's goes back to the intent's own)
-- returns it there, not to lane 0. Twin of sql/postgresql 0024.
ALTER TABLE dead_letters ADD COLUMN lane INTEGER NOT NULL DEFAULT 0;
ALTER TABLE dead_letters ADD COLUMN group_key TEXT NOT NULL DEFAULT '';
