-- People who sign in through the OpenID Connect provider (package sso): the
-- provider's issuer and subject identify a person for good, whatever their
-- email becomes, and point at the account they sign in to.
CREATE TABLE sso_identities (
    issuer         text        NOT NULL CHECK (length(issuer) BETWEEN 1 AND 2048),
    subject        text        NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    user_id        bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- the email the provider gave when the identity was linked or last used
    email          text        NOT NULL CHECK (length(email) <= 254),
    created_at     timestamptz NOT NULL DEFAULT now(),
    last_signed_in timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (issuer, subject)
);
CREATE INDEX sso_identities_user_id ON sso_identities (user_id);
