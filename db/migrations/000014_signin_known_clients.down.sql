DROP TABLE signin_known_addresses;
DELETE FROM signin_failures WHERE scope = 'device';
ALTER TABLE signin_failures DROP CONSTRAINT signin_failures_scope_check;
ALTER TABLE signin_failures ADD CONSTRAINT signin_failures_scope_check
    CHECK (scope IN ('address', 'pair', 'account'));
