ALTER TABLE api_keys
    DROP COLUMN allowed_routes,
    DROP COLUMN allowed_cidrs,
    DROP COLUMN read_only;
