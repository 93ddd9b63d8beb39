-- Sign-in that cannot be used to lock the owner out (issue 30, item 5).
--
-- A browser that signed in to an account before carries a signed device
-- cookie; its failed attempts are counted under its own 'device' scope
-- (keyed by a hash of the device id), apart from the account's.
ALTER TABLE signin_failures DROP CONSTRAINT signin_failures_scope_check;
ALTER TABLE signin_failures ADD CONSTRAINT signin_failures_scope_check
    CHECK (scope IN ('address', 'pair', 'account', 'device'));

-- The address blocks an account signed in from with its right password:
-- attempts from them are not spaced out by the account's failures from
-- elsewhere. Both columns are hashes, as in signin_failures.
CREATE TABLE signin_known_addresses (
    account         bytea       NOT NULL,
    address         bytea       NOT NULL,
    last_success_at timestamptz NOT NULL,
    PRIMARY KEY (account, address)
);
CREATE INDEX signin_known_addresses_last_success_at ON signin_known_addresses (last_success_at);
