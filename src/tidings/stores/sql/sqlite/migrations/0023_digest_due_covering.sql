-- 0023: the index of live digest windows carries each window's state, so a close pass
-- finds its due windows in the index alone. digest_claim (every close pass: the
-- scheduler's every 0.5 s, each worker's every second, inside the closer's write
-- transaction) asked for state = 'sealed' OR closes_at <= now over the index on
-- closes_at; state was not in it, so every live window's row was looked up, and the
-- rows are in window id order (the digest key first), one leaf page of the table each:
-- 203 pages a pass with 200 windows open in a table of 4,633, read again after every
-- other process's commit. Now 5 with none due. window_id before state keeps the
-- index's order the page's order (closes_at, window_id). Twin of sql/postgresql 0023.
DROP INDEX IF EXISTS digest_windows_due;
CREATE INDEX digest_windows_due ON digest_windows (closes_at, window_id, state)
    WHERE state IN ('open', 'sealed');
