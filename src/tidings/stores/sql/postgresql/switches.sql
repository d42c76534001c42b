-- Admission switches per campaign and per channel.

-- name: switch_upsert
INSERT INTO switches (scope, name, paused, changed_at, reason)
VALUES (%(scope)s, %(name)s, %(paused)s, %(now)s, %(reason)s)
ON CONFLICT (scope, name) DO UPDATE
SET paused = excluded.paused, changed_at = excluded.changed_at, reason = excluded.reason
RETURNING scope, name, paused, changed_at, reason

-- name: switch_all
SELECT scope, name, paused, changed_at, reason FROM switches ORDER BY scope, name
