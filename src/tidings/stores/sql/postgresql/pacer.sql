-- Pacer state: one JSON document per channel, read under a row lock and written in the
-- same transaction, so every process on every machine shares one budget per channel.

-- name: pacer_ensure
-- Make sure the row exists before locking it (a concurrent creator makes this wait,
-- then do nothing). Rolled back with the transaction if the pacer function raises.
INSERT INTO pacer_state (channel, state) VALUES (%s, NULL)
ON CONFLICT (channel) DO NOTHING

-- name: pacer_lock
-- The row's lock is held until COMMIT while the client works out the new state. A
-- client cut off meanwhile (its host gone from the network: the server sees an idle
-- session, not a broken one) would hold it, and stall every process of the channel,
-- until someone ended its session; the server ends it itself once it has been idle
-- in this transaction for idle_ms (PACER_IDLE_S; set for this transaction only).
-- The state is soft (in-flight counts, the next start, the 429 streak), so its commit
-- does not wait for the WAL flush (synchronous_commit off, this transaction only):
-- other sessions see it at once all the same, and what a server crash could forget
-- (its last fraction of a second) is long past when the server is back. A pacer
-- transaction costs no fsync; the ledger's claims and outcomes keep theirs.
SELECT state, set_config('idle_in_transaction_session_timeout', %(idle_ms)s, true),
       set_config('synchronous_commit', 'off', true)
FROM pacer_state WHERE channel = %(channel)s FOR UPDATE

-- name: pacer_read
SELECT state FROM pacer_state WHERE channel = %s

-- name: pacer_write
UPDATE pacer_state SET state = %s WHERE channel = %s

-- name: pacer_pause
-- Never shortens a pause; contends only with another pauser of the same channel.
INSERT INTO pacer_pauses (channel, until) VALUES (%s, %s)
ON CONFLICT (channel) DO UPDATE SET until = greatest(pacer_pauses.until, excluded.until)

-- name: pacer_paused_until
SELECT until FROM pacer_pauses WHERE channel = %s
