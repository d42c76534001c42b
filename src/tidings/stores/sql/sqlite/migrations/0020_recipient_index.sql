-- 0020: an index on the recipient of each intent, for an operator's look-up of one
-- recipient (`tidings inspect --recipient`, the dashboard's search), which scanned the
-- whole ledger: 0.44 s at a million intents, growing with it. One more index entry per
-- admitted intent (bench/RESULTS.md has admission with and without it). Twin of
-- sql/postgresql 0020.
CREATE INDEX IF NOT EXISTS intents_recipient ON intents (recipient_id);
