-- Sign-ups waiting for their email's confirmation, when the portal sends
-- email (PORTAL_SMTP_URL). A pending sign-up is not an account: it cannot
-- sign in and owns nothing; the account is made, with the password chosen
-- at sign-up, when the link mailed to the address is opened and that
-- password entered. Only the token's SHA-256 is stored.
CREATE TABLE signup_confirmations (
    token_hash    bytea       PRIMARY KEY CHECK (length(token_hash) = 32),
    email         text        NOT NULL CHECK (email ~ '^[^@\s]+@[^@\s]+$' AND length(email) <= 254),
    password_hash text        NOT NULL,
    plan_id       bigint      REFERENCES plans (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    -- set when the link made the account: a link works once
    used_at       timestamptz
);
CREATE INDEX signup_confirmations_expires_at ON signup_confirmations (expires_at);
