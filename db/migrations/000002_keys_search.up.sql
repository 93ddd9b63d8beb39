-- Indexes for the operator's keys list (apikeys.Service.List) at 100,000s of keys.

-- Revoked keys and keys with an expiry are few; these partial indexes let the
-- revoked and expired filters read only them instead of every key.
CREATE INDEX api_keys_revoked ON api_keys (id) WHERE revoked_at IS NOT NULL;
CREATE INDEX api_keys_expiring ON api_keys (expires_at) WHERE revoked_at IS NULL AND expires_at IS NOT NULL;

-- Trigram indexes let the search find a part of a key's name or of its owner's
-- email (ILIKE '%...%') without reading every key. pg_trgm ships with
-- PostgreSQL's contrib files and is a trusted extension (the database owner may
-- create it). Where it is missing, or the role may not create it, the search
-- still works, only by scanning: a missing index must not stop the server from
-- starting, so this migration then only leaves a notice.
-- fastupdate is off: with it, new entries wait in a pending list that every
-- search reads in full until a vacuum merges it (100,000 fresh keys made each
-- search 20 ms slower). Keys are created rarely; searches are what must be fast.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
        RAISE NOTICE 'pg_trgm is not installed on this server: keys search by name or email will scan';
        RETURN;
    END IF;
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE INDEX api_keys_name_trgm ON api_keys USING gin (name gin_trgm_ops) WITH (fastupdate = off);
    CREATE INDEX users_email_trgm ON users USING gin (email gin_trgm_ops) WITH (fastupdate = off);
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'may not create pg_trgm (%): keys search by name or email will scan', SQLERRM;
END;
$$;
