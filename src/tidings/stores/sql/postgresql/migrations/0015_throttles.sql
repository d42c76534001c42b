-- 0015: per-recipient throttles (tidings.core.throttle). One row per rule, recipient
-- and fixed window counts the sends reserved in it; a reservation is made by a
-- conditional upsert (sends < limit), so every worker process on every host shares one
-- count. One row per intent key, rule and window holds its reservation: a claim of the
-- same intent again in the same window is not counted twice, and a send that surely did
-- not happen hands its reservation back. Twin of sql/sqlite 0015; IF NOT EXISTS: as 0003.
CREATE TABLE IF NOT EXISTS throttle_windows (
    rule         text             NOT NULL,
    recipient    text             NOT NULL,
    window_start double precision NOT NULL,
    window_end   double precision NOT NULL,
    sends        integer          NOT NULL,
    PRIMARY KEY (rule, recipient, window_start)
);
CREATE INDEX IF NOT EXISTS throttle_windows_end ON throttle_windows (window_end);
CREATE TABLE IF NOT EXISTS throttle_holds (
    key          text             NOT NULL,
    rule         text             NOT NULL,
    window_start double precision NOT NULL,
    recipient    text             NOT NULL,
    window_end   double precision NOT NULL,
    PRIMARY KEY (key, rule, window_start)
);
CREATE INDEX IF NOT EXISTS throttle_holds_end ON throttle_holds (window_end);
