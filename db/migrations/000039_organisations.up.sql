-- Organisations (issue 37, item 1): the teams that consume an API. An
-- organisation is the developer account that holds its keys, plan, quotas,
-- alerts and usage (account_user_id), shared with the people who are its
-- members. Keys keep their user_id (the account), so the rate-limit
-- subject of every key stays "dev:<account id>": one budget per
-- organisation, and no counter is reset by this migration.
CREATE TABLE organisations (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        NOT NULL CHECK (length(name) BETWEEN 1 AND 254),
    account_user_id bigint      NOT NULL UNIQUE REFERENCES users (id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE org_members (
    org_id     bigint      NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    user_id    bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- owner: everything, invites and removes; member: keys, alerts, usage;
    -- read_only: sees keys and usage, changes nothing
    role       text        NOT NULL CHECK (role IN ('owner', 'member', 'read_only')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX org_members_user_id ON org_members (user_id);

-- An invitation is a one-time link emailed to an address; only its hash
-- is stored.
CREATE TABLE org_invitations (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id      bigint      NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    email       text        NOT NULL CHECK (length(email) <= 254),
    role        text        NOT NULL CHECK (role IN ('owner', 'member', 'read_only')),
    token_hash  bytea       NOT NULL UNIQUE,
    invited_by  bigint      REFERENCES users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    accepted_at timestamptz,
    accepted_by bigint      REFERENCES users (id) ON DELETE SET NULL
);
CREATE INDEX org_invitations_org_id ON org_invitations (org_id);

-- Every developer account has its personal organisation, whichever way the
-- account was made (sign-up, SSO, an operator, the CLI) or became a
-- developer's: one rule here rather than one in each of those paths.
CREATE FUNCTION personal_organisation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH org AS (
        INSERT INTO organisations (name, account_user_id) VALUES (NEW.email, NEW.id)
        ON CONFLICT (account_user_id) DO NOTHING
        RETURNING id
    )
    INSERT INTO org_members (org_id, user_id, role) SELECT id, NEW.id, 'owner' FROM org;
    RETURN NULL;
END;
$$;
CREATE TRIGGER users_personal_organisation
    AFTER INSERT OR UPDATE OF role ON users
    FOR EACH ROW WHEN (NEW.role = 'developer')
    EXECUTE FUNCTION personal_organisation();

-- Today's developer accounts, one organisation each, their holder its owner.
WITH orgs AS (
    INSERT INTO organisations (name, account_user_id, created_at)
    SELECT email, id, created_at FROM users WHERE role = 'developer' ORDER BY id
    RETURNING id, account_user_id, created_at
)
INSERT INTO org_members (org_id, user_id, role, created_at)
SELECT id, account_user_id, 'owner', created_at FROM orgs;

ALTER TABLE audit_log DROP CONSTRAINT audit_log_object_type_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_object_type_check
    CHECK (object_type IN ('plan', 'limit', 'key', 'user', 'token', 'service', 'organisation'));
