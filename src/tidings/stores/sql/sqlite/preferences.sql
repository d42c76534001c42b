-- Recipient preferences per channel (tidings.preferences.Preference).

-- name: preference_upsert
INSERT INTO preferences (recipient_id, channel, opted_out, quiet_start, quiet_end, timezone,
                         updated_at)
VALUES (:recipient_id, :channel, :opted_out, :quiet_start, :quiet_end, :timezone, :now)
ON CONFLICT (recipient_id, channel) DO UPDATE
SET opted_out = excluded.opted_out, quiet_start = excluded.quiet_start,
    quiet_end = excluded.quiet_end, timezone = excluded.timezone,
    updated_at = excluded.updated_at

-- name: preference_delete
DELETE FROM preferences WHERE recipient_id = :recipient_id AND channel = :channel

-- name: preferences_for
-- :pairs is a JSON array of [recipient_id, channel]; one primary-key lookup per pair.
SELECT p.recipient_id, p.channel, p.opted_out, p.quiet_start, p.quiet_end, p.timezone
FROM (
    SELECT DISTINCT json_extract(value, '$[0]') AS recipient_id,
                    json_extract(value, '$[1]') AS channel
    FROM json_each(:pairs)
) AS wanted
JOIN preferences AS p
  ON p.recipient_id = wanted.recipient_id AND p.channel = wanted.channel
