-- One-time password reset links made by operators (for a forgotten
-- password, or to let a newly invited operator choose one). The link holds a
-- random token; only its SHA-256 is stored, so a copy of this table opens no
-- account.
CREATE TABLE password_resets (
    token_hash bytea       PRIMARY KEY CHECK (length(token_hash) = 32),
    user_id    bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_by text        NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    -- set when the link is used: a link works once
    used_at    timestamptz
);
CREATE INDEX password_resets_user_id ON password_resets (user_id);
