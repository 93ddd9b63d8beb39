-- Usage records (package metering): per developer, plan, tier and period,
-- the admitted requests the tier counted, read from the usage history once
-- the period has closed. A record is never changed: requests that reach
-- the history late (an instance that could not flush) are added by a
-- further record of the next revision, so a receiver that sums records by
-- id gets the exact total. tier '' is every request of the developer on
-- the plan. id is the record's idempotent identifier, derived from the
-- other key columns.
CREATE TABLE meter_records (
    id              text        PRIMARY KEY,
    user_id         bigint      NOT NULL,
    plan            text        NOT NULL,
    tier            text        NOT NULL,
    period_start    timestamptz NOT NULL,
    period_end      timestamptz NOT NULL CHECK (period_end > period_start),
    revision        integer     NOT NULL CHECK (revision >= 0),
    requests        bigint      NOT NULL,
    rejected        bigint      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Delivery to the metering webhook: pending until a receiver answered
    -- 2xx; retried with backoff, never given up.
    delivered_at    timestamptz,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    locked_until    timestamptz,
    last_error      text        NOT NULL DEFAULT '',
    UNIQUE (user_id, plan, tier, period_start, revision)
);
CREATE INDEX meter_records_period ON meter_records (period_start, user_id);
CREATE INDEX meter_records_due ON meter_records (next_attempt_at) WHERE delivered_at IS NULL;

-- Which periods were read from the history, and how often: at close, and
-- once more an hour later for late requests.
CREATE TABLE meter_periods (
    period_start timestamptz PRIMARY KEY,
    period_end   timestamptz NOT NULL,
    checks       integer     NOT NULL,
    checked_at   timestamptz NOT NULL
);
