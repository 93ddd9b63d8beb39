-- Analytics rollups (package analytics), counted from every decision the
-- request log's writer sees, sampled or not, and added to by each instance
-- with additive upserts so that instances sum exactly. A consumer's
-- traffic over time is read from the usage history (usage_hours), which
-- already holds it per key and developer.
--
-- class is what the client got: 1 to 5 for the HTTP class of the API's
-- answer (or of Sluice's own 401/503), 9 for a rejection by Sluice (429),
-- 0 when Sluice did not see the answer (forward auth, Envoy). The latency
-- histogram counts the protected API's answers per bucket; its upper
-- bounds are analytics.LatencyBounds.

-- Every caller together, per hour: requests by plan, route and class, with
-- the API's latency.
CREATE TABLE traffic_hours (
    hour          timestamptz NOT NULL,
    plan          text        NOT NULL,
    route         text        NOT NULL,
    class         smallint    NOT NULL,
    requests      bigint      NOT NULL CHECK (requests >= 0),
    latency_count bigint      NOT NULL CHECK (latency_count >= 0),
    latency_sum   bigint      NOT NULL CHECK (latency_sum >= 0), -- microseconds
    latency       bigint[]    NOT NULL,
    PRIMARY KEY (hour, plan, route, class)
);

-- The same per UTC day, for ranges charted per day: a month is 30 rows
-- per plan, route and class instead of 720.
CREATE TABLE traffic_days (
    day           date        NOT NULL,
    plan          text        NOT NULL,
    route         text        NOT NULL,
    class         smallint    NOT NULL,
    requests      bigint      NOT NULL CHECK (requests >= 0),
    latency_count bigint      NOT NULL CHECK (latency_count >= 0),
    latency_sum   bigint      NOT NULL CHECK (latency_sum >= 0),
    latency       bigint[]    NOT NULL,
    PRIMARY KEY (day, plan, route, class)
);

-- Per UTC day and consumer (a key, or an anonymous address block): who
-- calls most and who is rejected most.
CREATE TABLE consumer_days (
    day      date   NOT NULL,
    plan     text   NOT NULL,
    key_id   bigint NOT NULL,
    user_id  bigint NOT NULL,
    address  text   NOT NULL,
    requests bigint NOT NULL CHECK (requests >= 0),
    rejected bigint NOT NULL CHECK (rejected >= 0),
    PRIMARY KEY (day, plan, key_id, user_id, address)
);
CREATE INDEX consumer_days_requests ON consumer_days (day, requests DESC);
CREATE INDEX consumer_days_plan ON consumer_days (plan, day, requests DESC);
CREATE INDEX consumer_days_rejected ON consumer_days (day, rejected DESC) WHERE rejected > 0;
CREATE INDEX consumer_days_user ON consumer_days (user_id, day);
CREATE INDEX consumer_days_key ON consumer_days (key_id, address, day);
