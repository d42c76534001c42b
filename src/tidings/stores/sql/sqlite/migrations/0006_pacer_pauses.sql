-- 0006: a channel's 429 pause in a row of its own, written by one statement, so the
-- pause reaches every worker process without waiting for the pacer state's next
-- read-modify-write (see Pacer.pause). The pacer state keeps its own copy for
-- reservations and the 429 streak.
CREATE TABLE pacer_pauses (
    channel TEXT PRIMARY KEY,
    until   REAL NOT NULL
);
