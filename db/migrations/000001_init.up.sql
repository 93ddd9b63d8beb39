-- Sluice's store of record. Every write to a table the enforcement snapshot reads
-- (plans, plan_limits, users, api_keys, api_key_secrets) sends NOTIFY sluice_changes
-- from a statement trigger, so no writer can forget to announce a change.

CREATE TABLE plans (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slug         text        NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    description  text        NOT NULL DEFAULT '' CHECK (length(description) <= 2000),
    -- the plan new developers get, and the plan callers without a key get
    is_default   boolean     NOT NULL DEFAULT false,
    is_anonymous boolean     NOT NULL DEFAULT false,
    -- public plans appear in the generated docs' comparison
    is_public    boolean     NOT NULL DEFAULT true,
    -- optimistic concurrency: every update must name the version it read
    version      integer     NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX plans_one_default ON plans (is_default) WHERE is_default;
CREATE UNIQUE INDEX plans_one_anonymous ON plans (is_anonymous) WHERE is_anonymous;

-- A plan's limits: plan-wide (route = '') or a per-endpoint tier (route is a
-- net/http ServeMux pattern such as 'GET /api/items/{id}').
CREATE TABLE plan_limits (
    id          bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    plan_id     bigint  NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    -- the policy name clients see in RateLimit-Policy, unique within a plan
    name        text    NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    route       text    NOT NULL DEFAULT '' CHECK (length(route) <= 200),
    algorithm   text    NOT NULL CHECK (algorithm IN ('fixed_window', 'sliding_window_log',
                         'sliding_window_counter', 'token_bucket', 'leaky_bucket')),
    limit_count bigint  NOT NULL CHECK (limit_count >= 1),
    window_ms   bigint  NOT NULL CHECK (window_ms BETWEEN 1000 AND 2678400000),
    burst       bigint  NOT NULL DEFAULT 0 CHECK (burst >= 0),
    cost        integer NOT NULL DEFAULT 1 CHECK (cost BETWEEN 1 AND 1000000),
    mode        text    NOT NULL DEFAULT 'reject' CHECK (mode IN ('reject', 'queue', 'degrade')),
    position    integer NOT NULL DEFAULT 0,
    UNIQUE (plan_id, name)
);
CREATE INDEX plan_limits_plan_id ON plan_limits (plan_id);

CREATE TABLE users (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email         text        NOT NULL CHECK (email ~ '^[^@\s]+@[^@\s]+$' AND length(email) <= 254),
    password_hash text        NOT NULL,
    role          text        NOT NULL CHECK (role IN ('operator', 'developer')),
    -- a developer's plan; operators have none
    plan_id       bigint      REFERENCES plans (id) ON DELETE RESTRICT,
    version       integer     NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));
CREATE INDEX users_plan_id ON users (plan_id);

-- An API key is an identity (its counters, its plan, its overrides); its secrets
-- live in api_key_secrets so that rotation keeps the identity and lets the old
-- secret run out after a grace period.
CREATE TABLE api_keys (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    -- NULL: the owner's plan
    plan_id      bigint      REFERENCES plans (id) ON DELETE RESTRICT,
    -- per-key limit overrides: a JSON array of limits replacing same-named plan limits
    overrides    jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(overrides) = 'array'),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz,
    version      integer     NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_user_id ON api_keys (user_id);
CREATE INDEX api_keys_plan_id ON api_keys (plan_id);

CREATE TABLE api_key_secrets (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key_id     bigint      NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    -- SHA-256 of the whole secret; the secret itself is never stored
    hash       bytea       NOT NULL UNIQUE CHECK (length(hash) = 32),
    -- the visible start of the secret, e.g. 'sk_live_4fQz'
    prefix     text        NOT NULL CHECK (length(prefix) BETWEEN 8 AND 32),
    -- set when a rotation retires this secret: valid until then
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_key_secrets_key_id ON api_key_secrets (key_id);
CREATE INDEX api_key_secrets_prefix ON api_key_secrets (prefix text_pattern_ops);

-- Operator API tokens for /admin/api/v1, hashed like API keys.
CREATE TABLE operator_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    hash         bytea       NOT NULL UNIQUE CHECK (length(hash) = 32),
    prefix       text        NOT NULL CHECK (length(prefix) BETWEEN 8 AND 32),
    revoked_at   timestamptz,
    last_used_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    -- who: 'user:<id>', 'token:<id>', 'bootstrap', 'system'
    actor       text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    -- what: e.g. 'plan.create', 'limit.update', 'key.revoke'
    action      text        NOT NULL CHECK (length(action) BETWEEN 1 AND 100),
    object_type text        NOT NULL CHECK (object_type IN ('plan', 'limit', 'key', 'user', 'token')),
    object_id   text        NOT NULL,
    before      jsonb,
    after       jsonb
);
CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_object ON audit_log (object_type, object_id, at DESC);
CREATE INDEX audit_log_actor ON audit_log (actor, at DESC);

CREATE FUNCTION sluice_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sluice_changes', TG_TABLE_NAME);
    RETURN NULL;
END;
$$;

CREATE TRIGGER plans_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON plans
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_change();
CREATE TRIGGER plan_limits_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON plan_limits
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_change();
CREATE TRIGGER users_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_change();
CREATE TRIGGER api_keys_notify AFTER INSERT OR UPDATE OF user_id, plan_id, overrides, expires_at, revoked_at OR DELETE OR TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_change();
CREATE TRIGGER api_key_secrets_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON api_key_secrets
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_change();
