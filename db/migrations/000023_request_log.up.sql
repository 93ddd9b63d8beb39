-- The request log: one row per logged decision (every rejection, a sample
-- of admissions), partitioned by UTC day so that retention drops whole
-- partitions instead of deleting rows. Partitions are created and dropped
-- by the portal (package requestlog), named request_log_pYYYYMMDD.
--
-- key_id and user_id are 0 for anonymous callers, whose address block
-- (/24, /48) is in address; keyed rows have address ''. weight is how many
-- decisions the row stands for: 1 for every rejection, 1/rate for a sampled
-- admission. status is what the client got (0 when Sluice did not see the
-- answer), upstream_status and latency_us what the protected API answered
-- and how long it took (0 when unknown). There is no foreign key: the log
-- outlives a deleted key.
CREATE TABLE request_log (
    id              bigserial   NOT NULL,
    at              timestamptz NOT NULL,
    way_in          text        NOT NULL,
    outcome         text        NOT NULL,
    plan            text        NOT NULL,
    route           text        NOT NULL,
    key_id          bigint      NOT NULL,
    user_id         bigint      NOT NULL,
    address         text        NOT NULL,
    layer           text        NOT NULL,
    retry_after     integer     NOT NULL CHECK (retry_after >= 0),
    degraded        text        NOT NULL,
    status          smallint    NOT NULL,
    upstream_status smallint    NOT NULL,
    latency_us      bigint      NOT NULL CHECK (latency_us >= 0),
    weight          integer     NOT NULL CHECK (weight >= 1)
) PARTITION BY RANGE (at);
CREATE INDEX request_log_at ON request_log (at, id);
CREATE INDEX request_log_user ON request_log (user_id, at, id);
CREATE INDEX request_log_key ON request_log (key_id, at, id) WHERE key_id <> 0;

-- Rows written per partition day, added to in the transaction that writes
-- them: the row cap is checked against this without counting partitions.
CREATE TABLE request_log_days (
    day  date   PRIMARY KEY,
    rows bigint NOT NULL CHECK (rows >= 0)
);
