-- The reference clock (tidings.core.clock.ReferenceClock): every process of a fleet
-- keeps the server's time, whatever its own host's clock says.

-- name: clock_now
-- clock_timestamp(), not now(): the moment of the reading, not of a transaction's start.
SELECT extract(epoch FROM clock_timestamp())::float8
