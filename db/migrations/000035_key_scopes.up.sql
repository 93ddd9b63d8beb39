-- Scoped keys (issue 37, item 4): a key may be limited to some routes
-- (route patterns as tiers name them), to client address ranges, and to
-- reading. Empty lists and false permit everything, as before.
ALTER TABLE api_keys
    ADD COLUMN allowed_routes text[] NOT NULL DEFAULT '{}',
    ADD COLUMN allowed_cidrs cidr[] NOT NULL DEFAULT '{}',
    ADD COLUMN read_only boolean NOT NULL DEFAULT false;
