-- Threshold alerts (issue 12, item 5): what developers want to hear about,
-- where it goes, which crossings have fired, and the queue of deliveries.

-- One rule per developer account (key_id NULL) and at most one per key; a
-- key's rule replaces the account's for that key.
CREATE TABLE alert_rules (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    key_id     bigint      REFERENCES api_keys (id) ON DELETE CASCADE,
    -- percents of a limit or quota, ascending, 1..100
    thresholds integer[]   NOT NULL CHECK (cardinality(thresholds) <= 10),
    -- "at this pace the quota runs out before it renews"
    pace       boolean     NOT NULL DEFAULT true,
    -- also by email to the account's address, when the portal has SMTP
    email      boolean     NOT NULL DEFAULT true,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX alert_rules_subject ON alert_rules (user_id, COALESCE(key_id, 0));

-- The developer's webhook endpoints. The signing secret must be usable to
-- sign, so it is stored sealed (AES-256-GCM under a key derived from the
-- session secret), never in the clear; only its visible prefix is plain.
CREATE TABLE alert_webhooks (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    url           text        NOT NULL CHECK (length(url) BETWEEN 8 AND 2000),
    secret_sealed bytea       NOT NULL,
    secret_prefix text        NOT NULL CHECK (length(secret_prefix) BETWEEN 6 AND 32),
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX alert_webhooks_user_id ON alert_webhooks (user_id);

-- One row per crossing: the primary key is what makes an alert fire once
-- per threshold per period across every portal instance (the evaluator
-- that inserts the row is the one that enqueues the deliveries).
CREATE TABLE alert_firings (
    subject      text        NOT NULL,
    limit_name   text        NOT NULL,
    threshold    text        NOT NULL,
    period_start timestamptz NOT NULL,
    -- past it the row can claim nothing more and is pruned
    period_end   timestamptz NOT NULL,
    fired_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subject, limit_name, threshold, period_start)
);
CREATE INDEX alert_firings_period_end ON alert_firings (period_end);

-- The delivery queue: a row per event and destination (a webhook, or an
-- email address), so nothing queued is lost on restart.
CREATE TABLE alert_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id         bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    webhook_id      bigint      REFERENCES alert_webhooks (id) ON DELETE CASCADE,
    email_to        text,
    event_type      text        NOT NULL,
    payload         bytea       NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- a worker holds a row while it sends; a crashed worker's lease runs out
    locked_until    timestamptz,
    last_status     integer,
    last_error      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    CHECK ((webhook_id IS NULL) <> (email_to IS NULL))
);
CREATE INDEX alert_deliveries_due ON alert_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX alert_deliveries_user ON alert_deliveries (user_id, id DESC);

-- Every attempt, with the receiver's response code: the portal's delivery log.
CREATE TABLE alert_delivery_attempts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id  bigint      NOT NULL REFERENCES alert_deliveries (id) ON DELETE CASCADE,
    attempted_at timestamptz NOT NULL DEFAULT now(),
    status_code  integer,
    error        text        NOT NULL DEFAULT ''
);
CREATE INDEX alert_delivery_attempts_delivery ON alert_delivery_attempts (delivery_id);
