-- Pacer state: one JSON document per channel, read and written in one write transaction.

-- name: pacer_read
SELECT state FROM pacer_state WHERE channel = ?

-- name: pacer_write
INSERT INTO pacer_state (channel, state) VALUES (?, ?)
ON CONFLICT (channel) DO UPDATE SET state = excluded.state

-- name: pacer_pause
-- Never shortens a pause.
INSERT INTO pacer_pauses (channel, until) VALUES (?, ?)
ON CONFLICT (channel) DO UPDATE SET until = max(pacer_pauses.until, excluded.until)

-- name: pacer_paused_until
SELECT until FROM pacer_pauses WHERE channel = ?
