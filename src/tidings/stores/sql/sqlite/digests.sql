-- Digests (tidings.core.digest; migrations/0016_digests.sql): windows of items per
-- digest key. Every writer here runs inside the caller's write transaction (BEGIN
-- IMMEDIATE), which serializes adds, seals and cancels across every process of the file.

-- name: digest_item_get
SELECT i.window_id, w.state, w.items, w.closes_at FROM digest_items i
JOIN digest_windows w ON w.window_id = i.window_id
WHERE i.digest_key = :digest_key AND i.item_key = :item_key

-- name: digest_open_get
SELECT window_id, opened_at, closes_at, window_s, wait_s, sliding, max_items, added, bytes
FROM digest_windows WHERE digest_key = :digest_key AND state = 'open'

-- name: digest_last_opened
SELECT max(opened_at) FROM digest_windows WHERE digest_key = :digest_key

-- name: digest_window_insert
-- Nothing when another writer opened the key's window first (the partial unique index
-- of open windows), or a window of the same id (opened at the same microsecond, read
-- before the other committed): the caller reads the key's open window again.
INSERT INTO digest_windows (window_id, digest_key, state, opened_at, closes_at, window_s,
                            wait_s, sliding, max_items, items, added, bytes, request)
VALUES (:window_id, :digest_key, 'open', :opened_at, :closes_at,
        :window_s, :wait_s, :sliding, :max_items, 0, 0, 0,
        :request)
ON CONFLICT DO NOTHING
RETURNING window_id

-- name: digest_item_insert
INSERT INTO digest_items (digest_key, item_key, window_id, seq, added_at, data)
VALUES (:digest_key, :item_key, :window_id, :seq, :added_at,
        :data)
ON CONFLICT (digest_key, item_key) DO NOTHING
RETURNING seq

-- name: digest_window_grow
UPDATE digest_windows SET items = items + 1, added = added + 1, bytes = bytes + :bytes,
    request = :request, closes_at = :closes_at,
    state = CASE WHEN items + 1 >= max_items THEN 'sealed' ELSE state END
WHERE window_id = :window_id
RETURNING state, items, closes_at

-- name: digest_seal
-- Closed to items: what joins the key from now on opens its next window.
UPDATE digest_windows SET state = 'sealed'
WHERE window_id = :window_id AND state IN ('open', 'sealed')
RETURNING window_id

-- name: digest_due
-- Windows whose time is up (or that were sealed, at their cap or by a closer that did
-- not finish), oldest first. The state IN (...) term is the partial index
-- digest_windows_due's own condition, written out: SQLite uses a partial index only for
-- a WHERE that names its condition, and without it scanned every window ever closed
-- (kept until retention purges them) and sorted them, on every close pass, inside the
-- closer's write transaction (a half-hour soak's notify p99 grew 1.5x with it). The
-- page is chosen in the index alone (it holds closes_at, window_id and state: migration
-- 0023), then only its rows are read: a WHERE over the rows themselves read the row of
-- every live window, one table page each (the table is in window id order).
SELECT window_id, digest_key, state, opened_at, closes_at, items, request
FROM digest_windows
WHERE window_id IN (
    SELECT window_id FROM digest_windows
    WHERE state IN ('open', 'sealed') AND (state = 'sealed' OR closes_at <= :now)
    ORDER BY closes_at, window_id
    LIMIT :limit)
ORDER BY closes_at, window_id

-- name: digest_claim
-- Seal a page of due windows for the closer whose write transaction this is; every
-- writer of the file takes that transaction in turn, so no other closer reads them
-- before this one has closed them (or rolled back).
-- (state IN (...): digest_windows_due's condition, as in digest_due; the page is chosen
-- in that index alone, which holds every column the page's WHERE and ORDER BY name.)
UPDATE digest_windows SET state = 'sealed'
WHERE window_id IN (
    SELECT window_id FROM digest_windows
    WHERE state IN ('open', 'sealed') AND (state = 'sealed' OR closes_at <= :now)
    ORDER BY closes_at, window_id
    LIMIT :limit)
RETURNING window_id, digest_key, state, opened_at, closes_at, items, request

-- name: digest_claim_window
-- The same for one window (the call that filled it admits it at once).
UPDATE digest_windows SET state = 'sealed'
WHERE window_id = :window_id
  AND (state = 'sealed' OR (state = 'open' AND closes_at <= :now))
RETURNING window_id, digest_key, state, opened_at, closes_at, items, request

-- name: digest_window_get
SELECT window_id, digest_key, state, opened_at, closes_at, items, request
FROM digest_windows WHERE window_id = :window_id

-- name: digest_window_items
SELECT item_key, seq, added_at, data FROM digest_items
WHERE window_id = :window_id AND cancelled_at IS NULL
ORDER BY seq

-- name: digest_items_of
-- The items of a page of windows (a JSON array of ids), each window's in order.
SELECT window_id, item_key, seq, added_at, data FROM digest_items
WHERE window_id IN (SELECT value FROM json_each(:window_ids)) AND cancelled_at IS NULL
ORDER BY window_id, seq

-- name: digest_finish
-- Sealed windows done, each with its state and its digest's keys (a JSON array of
-- {window_id, state, intent_keys}); answers the windows finished now.
UPDATE digest_windows SET state = f.state, closed_at = :now, intent_keys = f.intent_keys
FROM (SELECT json_extract(value, '$.window_id') AS window_id,
             json_extract(value, '$.state') AS state,
             json_extract(value, '$.intent_keys') AS intent_keys
      FROM json_each(:finished)) AS f
WHERE digest_windows.window_id = f.window_id AND digest_windows.state = 'sealed'
RETURNING digest_windows.window_id

-- name: digest_item_window_lock
-- The window an item is in, locked, if the item is not cancelled.
SELECT w.window_id, w.state FROM digest_items i
JOIN digest_windows w ON w.window_id = i.window_id
WHERE i.digest_key = :digest_key AND i.item_key = :item_key
  AND i.cancelled_at IS NULL

-- name: digest_item_cancel
UPDATE digest_items SET cancelled_at = :now
WHERE digest_key = :digest_key AND item_key = :item_key AND cancelled_at IS NULL

-- name: digest_window_shrink
UPDATE digest_windows SET items = items - 1 WHERE window_id = :window_id AND items > 0

-- name: digest_pending
-- Windows not yet admitted, the items they hold, and when the oldest opened.
SELECT count(*), coalesce(sum(items), 0), min(opened_at)
FROM digest_windows WHERE state IN ('open', 'sealed')

-- name: digest_purge_items
DELETE FROM digest_items WHERE window_id IN (
    SELECT window_id FROM digest_windows WHERE closed_at <= :before)

-- name: digest_purge_windows
DELETE FROM digest_windows WHERE closed_at <= :before
RETURNING window_id
