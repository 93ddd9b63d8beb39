-- Shadow tiers: decided and counted on every request, never enforced.
ALTER TABLE plan_limits DROP CONSTRAINT plan_limits_mode_check;
ALTER TABLE plan_limits ADD CONSTRAINT plan_limits_mode_check
    CHECK (mode IN ('reject', 'queue', 'degrade', 'shadow'));

-- Quotas: a tier algorithm renewing by calendar period at the developer's
-- billing anchor (window_ms is then unused and kept at one day).
ALTER TABLE plan_limits DROP CONSTRAINT plan_limits_algorithm_check;
ALTER TABLE plan_limits ADD CONSTRAINT plan_limits_algorithm_check
    CHECK (algorithm IN ('fixed_window', 'sliding_window_log', 'sliding_window_counter',
                         'token_bucket', 'leaky_bucket', 'quota'));
ALTER TABLE plan_limits ADD COLUMN period text NOT NULL DEFAULT ''
    CHECK (period IN ('', 'day', 'month', 'year'));
ALTER TABLE plan_limits ADD CONSTRAINT plan_limits_quota_period
    CHECK ((algorithm = 'quota') = (period <> ''));

-- A developer's quotas renew at their billing anchor: their sign-up instant
-- unless an operator sets another.
ALTER TABLE users ADD COLUMN billing_anchor timestamptz;
