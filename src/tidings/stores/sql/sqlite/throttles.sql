-- Per-recipient throttles (tidings.core.throttle; migrations/0015_throttles.sql): a
-- count per rule, recipient and window, and the reservation each intent key holds. Every
-- statement here runs inside the caller's write transaction (BEGIN IMMEDIATE), which
-- serializes reservations across every process of the file.

-- name: throttle_hold_get
SELECT 1 FROM throttle_holds
WHERE key = :key AND rule = :rule AND window_start = :window_start

-- name: throttle_count
-- Count one more send in the window unless :limit are counted already: no row is
-- returned when the window is full.
INSERT INTO throttle_windows (rule, recipient, window_start, window_end, sends)
VALUES (:rule, :recipient, :window_start, :window_end, 1)
ON CONFLICT (rule, recipient, window_start) DO UPDATE SET sends = sends + 1
WHERE sends < :limit
RETURNING sends

-- name: throttle_hold_insert
INSERT INTO throttle_holds (key, rule, window_start, recipient, window_end)
VALUES (:key, :rule, :window_start, :recipient, :window_end)
ON CONFLICT (key, rule, window_start) DO NOTHING

-- name: throttle_hold_delete
-- Every reservation of :key (a send that surely did not happen hands back each window
-- it was counted in: there is one, unless a window ended between its claims).
DELETE FROM throttle_holds WHERE key = :key
RETURNING rule, recipient, window_start

-- name: throttle_uncount
UPDATE throttle_windows SET sends = sends - 1
WHERE rule = :rule AND recipient = :recipient AND window_start = :window_start
  AND sends > 0

-- name: throttle_sends
-- The sends counted for a recipient in a rule's window (0: none).
SELECT coalesce(max(sends), 0) FROM throttle_windows
WHERE rule = :rule AND recipient = :recipient AND window_start = :window_start

-- name: throttle_purge_holds
DELETE FROM throttle_holds WHERE window_end <= :before

-- name: throttle_purge_windows
DELETE FROM throttle_windows WHERE window_end <= :before

-- name: intent_throttled_counts
-- Sends a throttle ended, per channel and rule (the intent's reason names the rule;
-- tidings.core.throttle.refused).
SELECT channel, reason, count(*) AS total FROM intents WHERE state = 'throttled'
GROUP BY channel, reason
ORDER BY channel, reason
