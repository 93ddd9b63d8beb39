-- Concurrency tiers go: no rate algorithm can stand in for them.
DELETE FROM plan_limits WHERE algorithm = 'concurrency';
ALTER TABLE plan_limits DROP CONSTRAINT plan_limits_algorithm_check;
ALTER TABLE plan_limits ADD CONSTRAINT plan_limits_algorithm_check
    CHECK (algorithm IN ('fixed_window', 'sliding_window_log', 'sliding_window_counter',
                         'token_bucket', 'leaky_bucket', 'quota'));
