-- Recipient preferences per channel (tidings.preferences.Preference).

-- name: preference_upsert
INSERT INTO preferences (recipient_id, channel, opted_out, quiet_start, quiet_end, timezone,
                         updated_at)
VALUES (%(recipient_id)s, %(channel)s, %(opted_out)s, %(quiet_start)s, %(quiet_end)s,
        %(timezone)s, %(now)s)
ON CONFLICT (recipient_id, channel) DO UPDATE
SET opted_out = excluded.opted_out, quiet_start = excluded.quiet_start,
    quiet_end = excluded.quiet_end, timezone = excluded.timezone,
    updated_at = excluded.updated_at

-- name: preference_delete
DELETE FROM preferences WHERE recipient_id = %(recipient_id)s AND channel = %(channel)s

-- name: preferences_for
-- Two arrays, one pair per index; one primary-key lookup per distinct pair.
SELECT p.recipient_id, p.channel, p.opted_out, p.quiet_start, p.quiet_end, p.timezone
FROM (
    SELECT DISTINCT recipient_id, channel
    FROM unnest(%(recipients)s::text[], %(channels)s::text[]) AS w(recipient_id, channel)
) AS wanted
JOIN preferences AS p
  ON p.recipient_id = wanted.recipient_id AND p.channel = wanted.channel
