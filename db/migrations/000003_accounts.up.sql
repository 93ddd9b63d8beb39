-- Server-side browser sessions and sign-in failure counts.

-- A browser session. The cookie holds a random identifier; only its keyed
-- hash is stored, so a copy of this table cannot be replayed as cookies.
-- Deleting a row ends the session everywhere, at once.
CREATE TABLE sessions (
    id_hash    bytea       PRIMARY KEY CHECK (length(id_hash) = 32),
    -- the signed-in user, so "sign out everywhere" and a password change can
    -- end all of a user's sessions; NULL for a session without a user
    user_id    bigint      REFERENCES users (id) ON DELETE CASCADE,
    data       bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX sessions_user_id ON sessions (user_id);
CREATE INDEX sessions_expires_at ON sessions (expires_at);

-- Failed sign-ins, counted per address, per (account, address) pair and per
-- account. Subjects are hashes: no email address or IP is stored in clear.
CREATE TABLE signin_failures (
    scope       text        NOT NULL CHECK (scope IN ('address', 'pair', 'account')),
    subject     bytea       NOT NULL,
    failures    integer     NOT NULL CHECK (failures >= 1),
    -- start of the counting window (address and pair scopes)
    first_at    timestamptz NOT NULL,
    last_at     timestamptz NOT NULL,
    PRIMARY KEY (scope, subject)
);
CREATE INDEX signin_failures_last_at ON signin_failures (last_at);
