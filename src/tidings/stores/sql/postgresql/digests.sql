-- Digests (tidings.core.digest; migrations/0016_digests.sql): windows of items per
-- digest key. Every writer here runs inside the caller's transaction; an add locks its
-- key's open window (FOR UPDATE), so a seal or a cancel of that window waits for it.

-- name: digest_item_get
SELECT i.window_id, w.state, w.items, w.closes_at FROM digest_items i
JOIN digest_windows w ON w.window_id = i.window_id
WHERE i.digest_key = %(digest_key)s AND i.item_key = %(item_key)s

-- name: digest_open_get
SELECT window_id, opened_at, closes_at, window_s, wait_s, sliding, max_items, added, bytes
FROM digest_windows WHERE digest_key = %(digest_key)s AND state = 'open'
FOR UPDATE

-- name: digest_last_opened
SELECT max(opened_at) FROM digest_windows WHERE digest_key = %(digest_key)s

-- name: digest_window_insert
-- Nothing when another writer opened the key's window first (the partial unique index
-- of open windows), or a window of the same id (opened at the same microsecond, read
-- before the other committed): the caller reads the key's open window again.
INSERT INTO digest_windows (window_id, digest_key, state, opened_at, closes_at, window_s,
                            wait_s, sliding, max_items, items, added, bytes, request)
VALUES (%(window_id)s, %(digest_key)s, 'open', %(opened_at)s::float8, %(closes_at)s::float8,
        %(window_s)s::float8, %(wait_s)s::float8, %(sliding)s, %(max_items)s, 0, 0, 0,
        %(request)s)
ON CONFLICT DO NOTHING
RETURNING window_id

-- name: digest_item_insert
INSERT INTO digest_items (digest_key, item_key, window_id, seq, added_at, data)
VALUES (%(digest_key)s, %(item_key)s, %(window_id)s, %(seq)s, %(added_at)s::float8,
        %(data)s)
ON CONFLICT (digest_key, item_key) DO NOTHING
RETURNING seq

-- name: digest_window_grow
UPDATE digest_windows SET items = items + 1, added = added + 1, bytes = bytes + %(bytes)s,
    request = %(request)s, closes_at = %(closes_at)s::float8,
    state = CASE WHEN items + 1 >= max_items THEN 'sealed' ELSE state END
WHERE window_id = %(window_id)s
RETURNING state, items, closes_at

-- name: digest_seal
-- Closed to items: what joins the key from now on opens its next window.
UPDATE digest_windows SET state = 'sealed'
WHERE window_id = %(window_id)s AND state IN ('open', 'sealed')
RETURNING window_id

-- name: digest_due
-- Windows whose time is up (or that were sealed, at their cap or by a closer that did
-- not finish), oldest first.
SELECT window_id, digest_key, state, opened_at, closes_at, items, request
FROM digest_windows
WHERE state = 'sealed' OR (state = 'open' AND closes_at <= %(now)s::float8)
ORDER BY closes_at, window_id
LIMIT %(limit)s

-- name: digest_claim
-- Seal and lock a page of due windows for this closer's transaction, which closes them.
-- SKIP LOCKED passes over the windows another closer's transaction holds (and a window
-- an add holds): closers at once take disjoint pages. A window another closer finished
-- after this statement's snapshot is checked again once unlocked, and left out.
WITH page AS (
    SELECT window_id FROM digest_windows
    WHERE state = 'sealed' OR (state = 'open' AND closes_at <= %(now)s::float8)
    ORDER BY closes_at, window_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE digest_windows w SET state = 'sealed'
FROM page WHERE w.window_id = page.window_id
RETURNING w.window_id, w.digest_key, w.state, w.opened_at, w.closes_at, w.items, w.request

-- name: digest_claim_window
-- The same for one window (the call that filled it admits it at once); waits for a
-- closer holding it, then finds it finished.
UPDATE digest_windows SET state = 'sealed'
WHERE window_id = %(window_id)s
  AND (state = 'sealed' OR (state = 'open' AND closes_at <= %(now)s::float8))
RETURNING window_id, digest_key, state, opened_at, closes_at, items, request

-- name: digest_window_get
SELECT window_id, digest_key, state, opened_at, closes_at, items, request
FROM digest_windows WHERE window_id = %(window_id)s

-- name: digest_window_items
SELECT item_key, seq, added_at, data FROM digest_items
WHERE window_id = %(window_id)s AND cancelled_at IS NULL
ORDER BY seq

-- name: digest_items_of
-- The items of a page of windows (a JSON array of ids), each window's in order.
SELECT window_id, item_key, seq, added_at, data FROM digest_items
WHERE window_id IN (SELECT jsonb_array_elements_text(%(window_ids)s::jsonb))
  AND cancelled_at IS NULL
ORDER BY window_id, seq

-- name: digest_finish
-- Sealed windows done, each with its state and its digest's keys (a JSON array of
-- {window_id, state, intent_keys}); answers the windows finished now.
UPDATE digest_windows w SET state = f.state, closed_at = %(now)s::float8,
    intent_keys = f.intent_keys
FROM jsonb_to_recordset(%(finished)s::jsonb) AS f(window_id text, state text,
                                                   intent_keys text)
WHERE w.window_id = f.window_id AND w.state = 'sealed'
RETURNING w.window_id

-- name: digest_item_window_lock
-- The window an item is in, locked, if the item is not cancelled.
SELECT w.window_id, w.state FROM digest_items i
JOIN digest_windows w ON w.window_id = i.window_id
WHERE i.digest_key = %(digest_key)s AND i.item_key = %(item_key)s
  AND i.cancelled_at IS NULL
FOR UPDATE OF w

-- name: digest_item_cancel
UPDATE digest_items SET cancelled_at = %(now)s::float8
WHERE digest_key = %(digest_key)s AND item_key = %(item_key)s AND cancelled_at IS NULL

-- name: digest_window_shrink
UPDATE digest_windows SET items = items - 1 WHERE window_id = %(window_id)s AND items > 0

-- name: digest_pending
-- Windows not yet admitted, the items they hold, and when the oldest opened.
SELECT count(*)::int, coalesce(sum(items), 0)::int, min(opened_at)
FROM digest_windows WHERE state IN ('open', 'sealed')

-- name: digest_purge_items
DELETE FROM digest_items WHERE window_id IN (
    SELECT window_id FROM digest_windows WHERE closed_at <= %(before)s::float8)

-- name: digest_purge_windows
DELETE FROM digest_windows WHERE closed_at <= %(before)s::float8
RETURNING window_id
