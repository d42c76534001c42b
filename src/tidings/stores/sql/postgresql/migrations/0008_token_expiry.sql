-- 0008: an API token may carry an expiry (tidings token create --expires-in 30d); from
-- expires_at on it is refused like a revoked one. NULL: it never expires (every token
-- made before this migration). Twin of sql/sqlite 0008. IF NOT EXISTS: as 0003.
ALTER TABLE api_tokens ADD COLUMN IF NOT EXISTS expires_at double precision;
