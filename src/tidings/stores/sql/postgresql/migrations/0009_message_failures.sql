-- 0009: a queue message counts the receives that failed on the message itself
-- (Transport.nack with failed=True) apart from receive_count, which every redelivery
-- after a receiver died or released drives up too: only failures make it poison.
-- Twin of sql/sqlite 0009. IF NOT EXISTS: as 0003.
ALTER TABLE messages ADD COLUMN IF NOT EXISTS failures integer NOT NULL DEFAULT 0;
