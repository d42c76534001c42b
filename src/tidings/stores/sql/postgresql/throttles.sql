-- Per-recipient throttles (tidings.core.throttle; migrations/0015_throttles.sql): a
-- count per rule, recipient and window, and the reservation each intent key holds.
-- Every writer here runs inside the caller's transaction; the count's conditional
-- upsert locks its row, so two workers on two hosts reserving for one recipient at once
-- take turns, and the second sees the first's count.

-- name: throttle_hold_get
SELECT 1 FROM throttle_holds
WHERE key = %(key)s AND rule = %(rule)s AND window_start = %(window_start)s::float8

-- name: throttle_count
-- Count one more send in the window unless %(limit)s are counted already: no row is
-- returned when the window is full (ON CONFLICT DO UPDATE re-reads the latest committed
-- count under the row's lock before its WHERE).
INSERT INTO throttle_windows AS w (rule, recipient, window_start, window_end, sends)
VALUES (%(rule)s, %(recipient)s, %(window_start)s::float8, %(window_end)s::float8, 1)
ON CONFLICT (rule, recipient, window_start) DO UPDATE SET sends = w.sends + 1
WHERE w.sends < %(limit)s
RETURNING sends

-- name: throttle_hold_insert
INSERT INTO throttle_holds (key, rule, window_start, recipient, window_end)
VALUES (%(key)s, %(rule)s, %(window_start)s::float8, %(recipient)s, %(window_end)s::float8)
ON CONFLICT (key, rule, window_start) DO NOTHING

-- name: throttle_hold_delete
-- Every reservation of %(key)s (a send that surely did not happen hands back each
-- window it was counted in: there is one, unless a window ended between its claims).
DELETE FROM throttle_holds WHERE key = %(key)s
RETURNING rule, recipient, window_start

-- name: throttle_uncount
UPDATE throttle_windows SET sends = sends - 1
WHERE rule = %(rule)s AND recipient = %(recipient)s
  AND window_start = %(window_start)s::float8 AND sends > 0

-- name: throttle_sends
-- The sends counted for a recipient in a rule's window (0: none).
SELECT coalesce(max(sends), 0) FROM throttle_windows
WHERE rule = %(rule)s AND recipient = %(recipient)s
  AND window_start = %(window_start)s::float8

-- name: throttle_purge_holds
DELETE FROM throttle_holds WHERE window_end <= %(before)s::float8

-- name: throttle_purge_windows
DELETE FROM throttle_windows WHERE window_end <= %(before)s::float8

-- name: intent_throttled_counts
-- Sends a throttle ended, per channel and rule (the intent's reason names the rule;
-- tidings.core.throttle.refused).
SELECT channel, reason, count(*)::int AS total FROM intents WHERE state = 'throttled'
GROUP BY channel, reason
ORDER BY channel, reason
