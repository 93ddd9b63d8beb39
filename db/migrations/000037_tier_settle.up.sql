-- Cost after the response (issue 36, item 3): a tier may count only
-- successful responses or only errors, and may take a request's cost from
-- a response header, settled once the response is known.
ALTER TABLE plan_limits
    ADD COLUMN count_when text NOT NULL DEFAULT 'always'
        CHECK (count_when IN ('always', 'success', 'error')),
    ADD COLUMN cost_header text NOT NULL DEFAULT ''
        CHECK (length(cost_header) <= 64);

-- Metering counts cost units: each tier's record holds what its admitted
-- requests cost (requests times the tier's cost) plus what the responses
-- settled. usage_tier_units keeps the settlements per developer, plan,
-- tier (its policy name, as the engine names it) and hour, added by every
-- instance like the usage history.
CREATE TABLE usage_tier_units (
    hour    timestamptz NOT NULL,
    user_id bigint      NOT NULL,
    plan    text        NOT NULL,
    tier    text        NOT NULL,
    units   bigint      NOT NULL,
    PRIMARY KEY (hour, user_id, plan, tier)
);

ALTER TABLE meter_records ADD COLUMN units bigint NOT NULL DEFAULT 0;
-- Records written before costs were metered counted one unit a request.
UPDATE meter_records SET units = requests;
