-- A developer an operator disabled: every key of theirs stops at once (the
-- snapshot leaves them out) and starts again when re-enabled. Updating users
-- already sends NOTIFY sluice_changes (users_notify in 000001).
ALTER TABLE users ADD COLUMN disabled_at timestamptz;
