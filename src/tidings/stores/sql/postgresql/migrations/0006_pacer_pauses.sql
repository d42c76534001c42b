-- 0006: a channel's 429 pause in a row of its own, written by one statement that waits
-- for no pacer transaction (those hold the pacer_state row's lock), so the pause
-- reaches every worker process on every machine at their next start. The pacer state
-- keeps its own copy for reservations and the 429 streak. Twin of sql/sqlite 0006.
CREATE TABLE pacer_pauses (
    channel text             PRIMARY KEY,
    until   double precision NOT NULL
);
