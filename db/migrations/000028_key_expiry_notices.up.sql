-- Which keys were told, by email, that they expire soon: one notice per key
-- and expiry (a key given a new expiry may be told again). The row is
-- written in the transaction that sends the email, so instances that look
-- at once send it once.
CREATE TABLE key_expiry_notices (
    key_id     bigint      NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL,
    sent_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key_id, expires_at)
);
