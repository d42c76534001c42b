-- 0009: a queue message counts the receives that failed on the message itself
-- (Transport.nack with failed=True) apart from receive_count, which every redelivery
-- after a receiver died or released drives up too: only failures make it poison.
ALTER TABLE messages ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
