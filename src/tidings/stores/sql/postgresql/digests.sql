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

-- name: digest_window_get
SELECT window_id, digest_key, state, opened_at, closes_at, items, request
FROM digest_windows WHERE window_id = %(window_id)s

-- name: digest_window_items
SELECT item_key, seq, added_at, data FROM digest_items
WHERE window_id = %(window_id)s AND cancelled_at IS NULL
ORDER BY seq

-- name: digest_finish
UPDATE digest_windows SET state = %(state)s, closed_at = %(now)s::float8,
    intent_keys = %(intent_keys)s
WHERE window_id = %(window_id)s AND state = 'sealed'
RETURNING window_id

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
