DROP INDEX IF EXISTS users_email_trgm;
DROP INDEX IF EXISTS api_keys_name_trgm;
-- Fails rather than cascading if something else has come to use pg_trgm.
DROP EXTENSION IF EXISTS pg_trgm;
DROP INDEX IF EXISTS api_keys_expiring;
DROP INDEX IF EXISTS api_keys_revoked;
