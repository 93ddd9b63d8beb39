ALTER TABLE users DROP COLUMN billing_anchor;
-- Quota tiers go: nothing else can stand in for them.
DELETE FROM plan_limits WHERE algorithm = 'quota';
ALTER TABLE plan_limits DROP CONSTRAINT plan_limits_quota_period;
ALTER TABLE plan_limits DROP COLUMN period;
ALTER TABLE plan_limits DROP CONSTRAINT plan_limits_algorithm_check;
ALTER TABLE plan_limits ADD CONSTRAINT plan_limits_algorithm_check
    CHECK (algorithm IN ('fixed_window', 'sliding_window_log', 'sliding_window_counter',
                         'token_bucket', 'leaky_bucket'));
-- Shadow tiers become enforced ones before the mode is refused again.
UPDATE plan_limits SET mode = 'reject' WHERE mode = 'shadow';
ALTER TABLE plan_limits DROP CONSTRAINT plan_limits_mode_check;
ALTER TABLE plan_limits ADD CONSTRAINT plan_limits_mode_check
    CHECK (mode IN ('reject', 'queue', 'degrade'));
