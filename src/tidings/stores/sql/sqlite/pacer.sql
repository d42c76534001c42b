-- Pacer state: one JSON document per channel, read and written in one write transaction.

-- name: pacer_read
SELECT state FROM pacer_state WHERE channel = ?

-- name: pacer_write
INSERT INTO pacer_state (channel, state) VALUES (?, ?)
ON CONFLICT (channel) DO UPDATE SET state = excluded.state
