-- 0015: per-recipient throttles (tidings.core.throttle). One row per rule, recipient
-- and fixed window counts the sends reserved in it (each reservation is a write
-- transaction, so every local process shares one count). One row per intent key, rule
-- and window holds its reservation: a claim of the same intent again in the same window
-- is not counted twice, and a send that surely did not happen hands its reservation
-- back.
CREATE TABLE throttle_windows (
    rule         TEXT    NOT NULL,
    recipient    TEXT    NOT NULL,
    window_start REAL    NOT NULL,
    window_end   REAL    NOT NULL,
    sends        INTEGER NOT NULL,
    PRIMARY KEY (rule, recipient, window_start)
) WITHOUT ROWID;
CREATE INDEX throttle_windows_end ON throttle_windows (window_end);
CREATE TABLE throttle_holds (
    key          TEXT NOT NULL,
    rule         TEXT NOT NULL,
    window_start REAL NOT NULL,
    recipient    TEXT NOT NULL,
    window_end   REAL NOT NULL,
    PRIMARY KEY (key, rule, window_start)
) WITHOUT ROWID;
CREATE INDEX throttle_holds_end ON throttle_holds (window_end);
