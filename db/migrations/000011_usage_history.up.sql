-- Usage history: admitted and rejected requests per minute (kept 24 hours)
-- and per hour (kept 90 days), per plan, route, key and developer. Each
-- portal instance tallies its own decisions in memory and adds them here
-- with an additive upsert, so the rows of several instances sum exactly.
-- Anonymous traffic has key_id = 0 and user_id = 0, and its address block
-- in address ('' for keys, and for the anonymous traffic of blocks beyond
-- an instance's bound per flush). Plans are named by slug, as the engine
-- knows them; there is no foreign key, so history outlives a deleted key.
CREATE TABLE usage_minutes (
    minute   timestamptz NOT NULL,
    plan     text        NOT NULL,
    route    text        NOT NULL,
    key_id   bigint      NOT NULL,
    user_id  bigint      NOT NULL,
    address  text        NOT NULL,
    admitted bigint      NOT NULL CHECK (admitted >= 0),
    rejected bigint      NOT NULL CHECK (rejected >= 0),
    PRIMARY KEY (minute, plan, route, key_id, user_id, address)
);
CREATE INDEX usage_minutes_user ON usage_minutes (user_id, minute);
CREATE INDEX usage_minutes_key ON usage_minutes (key_id, minute);

CREATE TABLE usage_hours (
    hour     timestamptz NOT NULL,
    plan     text        NOT NULL,
    route    text        NOT NULL,
    key_id   bigint      NOT NULL,
    user_id  bigint      NOT NULL,
    address  text        NOT NULL,
    admitted bigint      NOT NULL CHECK (admitted >= 0),
    rejected bigint      NOT NULL CHECK (rejected >= 0),
    PRIMARY KEY (hour, plan, route, key_id, user_id, address)
);
CREATE INDEX usage_hours_user ON usage_hours (user_id, hour);
CREATE INDEX usage_hours_key ON usage_hours (key_id, hour);

-- Would-be rejections of shadow tiers, per minute (kept 24 hours): who a
-- tier in shadow mode would have rejected, and how often.
CREATE TABLE shadow_minutes (
    minute     timestamptz NOT NULL,
    plan       text        NOT NULL,
    tier       text        NOT NULL,
    key_id     bigint      NOT NULL,
    user_id    bigint      NOT NULL,
    address    text        NOT NULL,
    rejections bigint      NOT NULL CHECK (rejections >= 0),
    PRIMARY KEY (minute, plan, tier, key_id, user_id, address)
);
CREATE INDEX shadow_minutes_plan ON shadow_minutes (plan, minute);
