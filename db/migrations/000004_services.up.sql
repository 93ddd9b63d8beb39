-- Services and their routes: what Sluice protects, as data. A service is an API
-- an operator declares (the sample API is the "demo" service); its routes are
-- net/http ServeMux patterns ('GET /api/items/{id}'). A tier's route names one
-- of them: patterns are unique across services, so a pattern alone says which
-- service's route a tier limits.

CREATE TABLE services (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slug         text        NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    -- host names the service answers to (forward-auth, the reverse proxy)
    hosts        text[]      NOT NULL DEFAULT '{}' CHECK (cardinality(hosts) <= 20),
    -- where the portal's reverse proxy sends the service's requests; '' for none
    upstream_url text        NOT NULL DEFAULT '' CHECK (length(upstream_url) <= 2000),
    version      integer     NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE service_routes (
    id         bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    service_id bigint  NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    pattern    text    NOT NULL UNIQUE CHECK (length(pattern) BETWEEN 1 AND 200),
    position   integer NOT NULL DEFAULT 0
);
CREATE INDEX service_routes_service_id ON service_routes (service_id);

-- Service tokens let a program outside the portal (the guard package) read the
-- policy it enforces; hashed like API keys, shown once.
CREATE TABLE service_tokens (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    service_id bigint      NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    name       text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    hash       bytea       NOT NULL UNIQUE CHECK (length(hash) = 32),
    prefix     text        NOT NULL CHECK (length(prefix) BETWEEN 8 AND 32),
    revoked_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX service_tokens_service_id ON service_tokens (service_id);

ALTER TABLE audit_log DROP CONSTRAINT audit_log_object_type_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_object_type_check
    CHECK (object_type IN ('plan', 'limit', 'key', 'user', 'token', 'service'));

CREATE TRIGGER services_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON services
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_change();
CREATE TRIGGER service_routes_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON service_routes
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_change();

-- The sample API becomes the demo service, declared like any other, and every
-- route an existing tier names becomes one of its routes, so no tier is left
-- naming an undeclared route.
WITH demo AS (
    INSERT INTO services (slug, name) VALUES ('demo', 'Demo API') RETURNING id
)
INSERT INTO service_routes (service_id, pattern, position)
SELECT demo.id, r.pattern, r.position
FROM demo, (
    SELECT pattern, min(position) AS position FROM (
        VALUES ('GET /api/search', 0), ('GET /api/items/{id}', 1), ('POST /api/reports', 2),
               ('GET /api/jobs/{id}', 3)
        UNION ALL
        SELECT DISTINCT route, 100 FROM plan_limits WHERE route <> ''
    ) AS all_routes (pattern, position)
    GROUP BY pattern
) AS r;
